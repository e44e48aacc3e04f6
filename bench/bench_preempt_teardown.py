"""A two-node job told to stop for a preemption: how long from the signal until its batch script could requeue it.

    python bench/bench_preempt_teardown.py                  # 3 runs; about 1 minute on 2 busy cores
    python bench/bench_preempt_teardown.py --runs 5 --launcher torchrun

Two torchrun agents on this machine are the job's two nodes (2 workers each: 4 ranks, gloo over TCP, CPU), running
`burstd.train.example` as the storm does (0.3 s a step, a periodic checkpoint every 10 steps). At step --signal-at
the second node's workers get SIGUSR1, as burstd-agent sends it on a spot notice. The multi-node template requeues
only after srun has ended (both agents and all their workers gone) and `python -m burstd.train should-requeue` has
answered. Printed per run, seconds after the signal:
  durable     the preemption checkpoint's manifest is on disk (what an early requeue would wait for)
  workers     every worker process of both nodes has exited
  agent1      the signalled node's agent exited
  srun_end    both agents exited (srun returns to the batch script)
  query       srun_end plus the time `should-requeue` takes (a Python start), when the template calls requeue
and the part of `query` an early requeue would save (query - durable).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from burstd.testbed.procs import children, kill_tree, running, start_local_nodes, wait_for_step
from burstd.train.store import CheckpointStore


def preempt_checkpoint_written(ckpt: Path) -> bool:
    latest = CheckpointStore(ckpt).listing().latest
    return latest is not None and latest.reason == "preempt"


def run_once(work: Path, launcher: str, signal_at: int, steps: int) -> dict[str, float]:
    ckpt, logs = work / "ckpt", [work / "node0.log", work / "node1.log"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               SLURM_JOB_ID="4242", SLURM_RESTART_COUNT="0")
    launch = [sys.executable, "-m", "torch.distributed.run" if launcher == "torchrun" else "burstd.train.launch"]
    train = ["--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", "--shutdown-timeout=100",
             "-m", "burstd.train.example", "--steps", str(steps), "--seed", "1", "--ckpt-dir", str(ckpt),
             "--out", str(work / "final.pt"), "--ckpt-every", "10", "--step-sleep", "0.3"]
    procs = start_local_nodes(launch, train, logs, env=env, cwd=REPO)
    try:
        wait_for_step(logs[1], procs, signal_at)
        signalled = time.time()
        for worker in children(procs[1].pid):  # the agent's direct children are its workers
            os.kill(worker, signal.SIGUSR1)
        marks: dict[str, float] = {}
        workers = [w for p in procs for w in children(p.pid)]
        while any(p.poll() is None for p in procs) and time.time() < signalled + 120:
            now = time.time() - signalled
            if "durable" not in marks and preempt_checkpoint_written(ckpt):
                marks["durable"] = now
            if "workers" not in marks and not any(running(w) for w in workers):
                marks["workers"] = now
            if "agent1" not in marks and procs[1].poll() is not None:
                marks["agent1"] = now
            time.sleep(0.01)
        marks["srun_end"] = time.time() - signalled
        marks.setdefault("durable", marks["srun_end"] if preempt_checkpoint_written(ckpt) else float("nan"))
        marks.setdefault("agent1", marks["srun_end"])
        marks.setdefault("workers", marks["srun_end"])
        started = time.time()
        query = subprocess.run([sys.executable, "-m", "burstd.train", "should-requeue", str(ckpt)],
                               check=False, env=env, cwd=REPO, capture_output=True, text=True)
        if query.returncode != 0:
            raise SystemExit(f"should-requeue said no: {query.stderr}")
        marks["query"] = marks["srun_end"] + time.time() - started
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p)
    marks["rc0"], marks["rc1"] = procs[0].returncode, procs[1].returncode
    return marks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--launcher", choices=("launch", "torchrun"), default="launch",
                    help="burstd.train.launch (the templates' default) or plain torchrun (the storm's job env)")
    ap.add_argument("--signal-at", type=int, default=15)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    rows = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-teardown-") as d:
            row = run_once(Path(d), args.launcher, args.signal_at, args.steps)
        rows.append(row)
        print(f"run {i + 1}: durable={row['durable']:.2f} workers={row['workers']:.2f} agent1={row['agent1']:.2f} srun_end={row['srun_end']:.2f} "
              f"query={row['query']:.2f} saved_by_early_requeue={row['query'] - row['durable']:.2f} "
              f"rc=({row['rc0']:.0f},{row['rc1']:.0f})", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in ("durable", "workers", "agent1", "srun_end", "query")}
    print(f"median: durable={med['durable']:.2f} workers={med['workers']:.2f} agent1={med['agent1']:.2f} srun_end={med['srun_end']:.2f} "
          f"query={med['query']:.2f} saved_by_early_requeue={med['query'] - med['durable']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
