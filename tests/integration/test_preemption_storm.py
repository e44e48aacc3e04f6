"""The preemption path on the bed, every case that must come out right, in one daemon session.

1. A cancelled job never comes back, the jobs running on a reclaimed node do: job A (the single-node
   template, on a cloud node with no DNS for its own hostname) trains on cloud node N and is cancelled with
   `scancel` (SIGTERM): it checkpoints and stays CANCELLED. Job B, a plain `sleep` that never asked for the
   preemption signal, runs on N too. N is reclaimed with notice: the agent leaves B alone, burstd requeues
   B (and only B) when the VM goes; B completes, A is still CANCELLED with no restart.
2. A storm: template jobs (single- and multi-node) on every cloud node; half of the nodes reclaimed at once
   with notice, then half without (a power-off: SIGKILL to the whole VM). Every job completes bit-identical
   to an uninterrupted run; the steps each job lost are measured from its log and printed as a table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.bed, pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SINGLE = REPO / "sbatch_templates" / "torchrun-single-node.sbatch"
MULTI = REPO / "sbatch_templates" / "torchrun-multi-node.sbatch"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
STEPS = 60
CKPT_EVERY = 10
STEP_SLEEP = 0.3
SEED = 5
NOTICE_S = 15
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="module")
def burst_cluster(slurm_bed):
    from burstd.config import load_config
    from tests.integration.daemon_bed import bed_daemon_config, running_daemon, world_readable_dir

    d = world_readable_dir("burstd-storm-")
    cfg_path = bed_daemon_config(slurm_bed, d, agent={"poll_interval_s": 1.0},
                                 budget={"default_account_usd": 100000})
    with running_daemon(slurm_bed, cfg_path, d / "burstd.log"):
        yield slurm_bed, cfg_path, load_config(cfg_path), d
    shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------------------------- helpers


def _train_args(steps: int = STEPS) -> str:
    return (f"-m burstd.train.example --steps {steps} --seed {SEED} --ckpt-every {CKPT_EVERY} "
            f"--step-sleep {STEP_SLEEP}")


def _submit_template(bed, template: Path, partition: str, d: Path, name: str, *, nodes: int = 1,
                     nproc: int = 2, extra: tuple[str, ...] = ()) -> tuple[int, Path, Path]:
    ckpt, log = d / f"{name}-ckpt", d / f"{name}.log"
    ckpt.mkdir()
    exports = {"CKPT_DIR": str(ckpt), "NPROC": str(nproc), "PYTHON": sys.executable, "TORCHRUN": TORCHRUN,
               "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TRAIN_ARGS": _train_args()}
    if nodes > 1:
        exports["GLOO_SOCKET_IFNAME"] = "eth0"
    export = "ALL," + ",".join(f"{k}={v}" for k, v in exports.items())
    # --cpus-per-task from the template (2: one a process, the whole of a bed cloud node) unless overridden
    opts = ["-p", partition, "-N", str(nodes), "--time=20", f"--job-name={name}", f"--output={log}",
            f"--export={export}", *extra]
    return bed.sbatch(opts, template.read_text()), ckpt, log


def _state(bed, job: int) -> str:
    return bed.job(job).get("JobState", "")


def _restarts(bed, job: int) -> int:
    return int(bed.job(job).get("Restarts", "0") or 0)


def _nodes(bed, job: int) -> list[str]:
    nodelist = bed.job(job).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        return []
    return bed.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def _steps_by_run(log: Path) -> list[list[int]]:
    runs: list[list[int]] = []
    if not log.exists():
        return runs
    for line in log.read_text(errors="replace").splitlines():
        if re.search(r"job \d+ run \d+ on ", line):
            runs.append([])
        m = re.search(r"rank=0 step=(\d+) ", line)
        if m and runs:
            runs[-1].append(int(m.group(1)))
    return runs


def _last_step(log: Path) -> int:
    runs = _steps_by_run(log)
    return max(runs[-1]) if runs and runs[-1] else 0


def _preempt(cfg_path: Path, node: str, notice: float) -> None:
    subprocess.run([sys.executable, "-m", "burstd.cli.app", "preempt", node, "--notice", str(notice),
                    "-c", str(cfg_path)], capture_output=True, text=True, check=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))


def _complete_checkpoints(ckpt: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in ckpt.glob("step-*")
                  if re.fullmatch(r"step-\d{9}", p.name) and (p / "burstd-checkpoint.json").exists())


def _same_weights(a: Path, b: Path) -> bool:
    sa, sb = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    return sa["model"].keys() == sb["model"].keys() and all(
        torch.equal(sa["model"][k], sb["model"][k]) for k in sa["model"])


def _lost_steps(log: Path) -> list[int]:
    """Steps redone per interruption: the last step a run printed minus the step the next run resumed after."""
    runs = [r for r in _steps_by_run(log) if r]
    return [max(prev) - (min(nxt) - 1) for prev, nxt in zip(runs, runs[1:])]


# --------------------------------------------------------------------------------------------- the tests


def test_cancelled_job_stays_cancelled_and_the_plain_job_running_there_is_requeued_on_reclaim(burst_cluster):
    bed, cfg_path, _cfg, d = burst_cluster
    d = d / "cancel"
    d.mkdir()
    job_a, ckpt_a, log_a = _submit_template(bed, SINGLE, bed.cloud_partition, d, "a", nproc=1,
                                            extra=("--cpus-per-task=1",))
    job_b = None
    try:
        bed.wait_for(lambda: _state(bed, job_a) == "RUNNING", 240, "job A to run on a cloud node")
        node = _nodes(bed, job_a)[0]
        # the single-node template trains on a cloud node whose hostname no DNS resolves
        bed.wait_for(lambda: _last_step(log_a) >= 3, 120, "job A to train on the DNS-less cloud node")
        flag = d / "b.ran"
        job_b = bed.sbatch(["-p", bed.cloud_partition, "-w", node, "-n1", "--cpus-per-task=1", "--requeue",
                            "--time=10", f"--output={d / 'b.log'}"],
                           "#!/bin/bash\necho \"run ${SLURM_RESTART_COUNT:-0}\" >> " + str(flag) + "\n"
                           "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then sleep 600; fi\n")
        bed.wait_for(lambda: _state(bed, job_b) == "RUNNING", 120, "job B (plain sleep) to run beside A")
        assert _nodes(bed, job_b) == [node]

        bed.run(["scancel", str(job_a)])  # SIGTERM: a cancel, not a preemption
        bed.wait_for(lambda: _state(bed, job_a) in ENDED, 60, "job A to end")
        text = bed.wait_for(lambda: "cancelled: not requeueing" in log_a.read_text() and log_a.read_text(), 30,
                            "job A's script to see the cancel")
        assert "requeueing job" not in text
        assert _complete_checkpoints(ckpt_a), "the cancelled training still saves its checkpoint"

        _preempt(cfg_path, node, NOTICE_S)
        bed.wait_for(lambda: _restarts(bed, job_b) >= 1, NOTICE_S + 90, "burstd to requeue job B")
        bed.wait_for(lambda: _state(bed, job_b) == "COMPLETED", 240, "job B to run again and complete")
        assert flag.read_text().split("\n")[:2] == ["run 0", "run 1"]
        assert _state(bed, job_a) == "CANCELLED" and _restarts(bed, job_a) == 0
        assert len(_steps_by_run(log_a)) == 1, "the cancelled job ran again"
    finally:
        for j in (job_a, job_b):
            if j:
                bed.run(["scancel", str(j)], check=False)
