"""A preempted job's round trip on the bed: notice -> requeued -> running again, baseline tree vs this one.

    git worktree add /tmp/baseline 71eb0af   # any checkout of the tree to compare against
    sudo BURSTD_BED_NAME=mine BURSTD_BED_SLOT=7 python bench/bench_requeue_round_trip.py --baseline /tmp/baseline

Root is needed (the live Slurm bed: tests/bed.py's settings, ``BURSTD_BED_*``). For each tree (the baseline
first, then this one), with the same bed and the same burstd config (a constant waiting policy: a job bursts
once it has waited --gate seconds, the first-wait gate a site's policy imposes):

1. the on-prem partition is filled with two long jobs; a preemptible job (``JOB``: the templates' protocol
   without the training) is submitted there, waits out the gate, bursts to a cloud node and runs;
2. ``burstctl preempt NODE --notice N``: the node's agent drains it and signals the job, which exits with the
   requeue code and requeues itself (``scontrol requeue``, as the templates do once the checkpoint is saved);
3. the clock runs until Slurm counts the restart (requeued) and until the job runs again (the trace of its
   state, reason and node is printed with ``--keep``).

The daemon of each tree runs from that tree (``PYTHONPATH``), everything else is this tree's. Printed: the times
from the notice for each tree, and this tree's over the baseline's (the ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from burstd.testbed.daemon_process import DaemonProcess
from burstd.testbed import Bed, BedConfig
from tests.integration.daemon_bed import bed_daemon_config, cleanup_vms

USER = "burstuser"

#: A preemptible job as the sbatch templates make one, without the training: it asks burstd-agent for the
#: notice's signal (BURSTD_PREEMPTIBLE=1), its program exits with the requeue code on SIGUSR1, and the batch
#: script then requeues the job itself, as the templates do after the checkpoint.
JOB = """#!/bin/bash
export BURSTD_PREEMPTIBLE=1
python3 -c 'import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *_: sys.exit(85)); time.sleep(1800)'
if [ $? -eq 85 ]; then scontrol requeue "$SLURM_JOB_ID"; fi
"""


def _python_for(tree: Path) -> str:
    """An interpreter that imports burstd from ``tree`` first: run from there (``python -m`` puts the working folder
    first on the path) with ``tree`` first on PYTHONPATH (the daemon runner prepends this tree's root)."""
    wrapper = Path(tempfile.mkdtemp(prefix="burstd-rt-")) / "python"
    wrapper.write_text(f"#!/bin/sh\ncd {tree} || exit 1\n"
                       f"PYTHONPATH={tree}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _wait(pred, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def one_round(bed: Bed, tree: Path, gate_s: float, notice_s: float, keep: bool = False) -> dict:
    d = Path(tempfile.mkdtemp(prefix="burstd-rt-", dir="/tmp"))
    os.chmod(d, 0o755)
    cfg = bed_daemon_config(bed, d, agent={"poll_interval_s": 1.0},
                            **{"policy.waiting": {"kind": "constant", "min_wait_s": gate_s, "min_expected_wait_s": 0}})
    python = _python_for(tree)
    daemon = DaemonProcess(cfg, log_path=d / "burstd.log", python=python)
    bed.reset_cloud_nodes()
    jobs: list[int] = []
    try:
        with bed.hooks("burstd"):
            daemon.start()
            for _ in range(2):  # on-prem full: the job can only burst
                jobs.append(bed.sbatch(["-p", bed.config.onprem_partition, "-n", "2", "-t", "30"],
                                       "#!/bin/sh\nsleep 1800\n", user=USER))
            job = bed.sbatch(["-p", bed.config.onprem_partition, "-n", "2", "-t", "10", "--requeue"], JOB,
                             user=USER)
            jobs.append(job)
            _wait(lambda: bed.job(job).get("JobState") == "RUNNING", gate_s + 180, "the job to burst and run")
            node = bed.job(job)["NodeList"]
            t0 = time.time()
            subprocess.run([sys.executable, "-m", "burstd.cli.app", "preempt", node, "--notice", str(notice_s),
                            "-c", str(cfg)], check=True, capture_output=True, env=dict(os.environ,
                                                                                 PYTHONPATH=str(REPO)))
            trace: list[tuple] = []  # (seconds after the notice, state, reason, restarts): each change

            def seen() -> dict:
                info = bed.job(job)
                key = (info.get("JobState"), info.get("Reason"), info.get("Restarts"), info.get("NodeList"))
                if not trace or trace[-1][1:] != key:
                    trace.append((round(time.time() - t0, 1), *key))
                return info

            _wait(lambda: int(seen().get("Restarts", "0") or 0) >= 1, notice_s + 120, "the requeue")
            requeued = time.time() - t0
            _wait(lambda: (i := seen()).get("JobState") == "RUNNING" and i.get("Restarts") == "1",
                  gate_s + 300, "the job to run again")
            again = time.time() - t0
            if keep:
                print(f"{tree}: kept {d}; job {job}: {trace}", flush=True)
            return {"tree": str(tree), "node": node, "notice_s": notice_s, "gate_s": gate_s,
                    "requeued_s": round(requeued, 1), "running_again_s": round(again, 1),
                    "after_deadline_s": round(again - notice_s, 1), "restarts": bed.job(job).get("Restarts"),
                    "trace": trace}
    finally:
        if jobs:
            bed.run(["scancel", *map(str, jobs)], check=False)
        daemon.stop()
        cleanup_vms(cfg)
        shutil.rmtree(Path(python).parent, ignore_errors=True)
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the tree to compare with (e.g. /work/main)")
    ap.add_argument("--gate", type=float, default=60.0, help="the waiting policy's first-wait gate, seconds")
    ap.add_argument("--notice", type=float, default=30.0, help="the notice, seconds")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep each round's folder (daemon log) and print its trace")
    ap.add_argument("--only", choices=["baseline", "this"], help="run one tree only (no ratio)")
    args = ap.parse_args(argv)
    defaults = {"suspend_time": 10, "suspend_timeout": 10, "cred_expire": 10}  # as the test suite's bed
    bed = Bed(BedConfig.from_env(**{k: v for k, v in defaults.items()
                                    if not os.environ.get(f"BURSTD_BED_{k.upper()}")}))
    bed.up(install=False)
    trees = {"baseline": args.baseline.resolve(), "this": REPO}
    rounds = [one_round(bed, tree, args.gate, args.notice, args.keep) for name, tree in trees.items()
              if args.only in (None, name)]
    if args.only:
        print(json.dumps(rounds, indent=2))
        return 0
    base, mine = rounds
    print(f"{'tree':<28} {'requeued':>9} {'running again':>14}  (seconds after the notice; notice {args.notice:g} s,"
          f" gate {args.gate:g} s)")
    for r in rounds:
        print(f"{r['tree']:<28} {r['requeued_s']:>9.1f} {r['running_again_s']:>14.1f}")
    ratio = mine["running_again_s"] / base["running_again_s"]
    print(f"ratio (this tree / baseline), notice -> running again: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "ratio_running_again": round(ratio, 3)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
