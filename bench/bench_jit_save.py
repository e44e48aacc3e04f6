"""A node lost without notice: what the survivors' just-in-time save saves, against periodic checkpoints alone.

    python bench/bench_jit_save.py                       # widths 256,1024; ~3 minutes on 2 busy cores
    python bench/bench_jit_save.py --widths 2048 --ckpt-every 10 --kill-at 17

Two torchrun agents on this machine are the job's two nodes (2 workers each: 4 ranks, gloo over TCP, CPU), running
`burstd.train.example` with a periodic checkpoint every --ckpt-every steps. At step --kill-at the second node's
agent and workers are SIGKILLed at once. Each width runs twice in the same session: the baseline with --no-jit
(the survivors crash, the job resumes from its last periodic checkpoint) and with the survivors' save. Printed
per run:
  redone     steps the resumed job does again: the last step any rank printed minus the newest complete
             checkpoint's step
  durable_s  from the kill to that checkpoint's manifest on disk (baseline: n/a, it was written before)
  exit_s     from the kill to the surviving agent's exit (what holds the job up before it can requeue)
  step_s     median step time before the kill (the exchange of each rank's RNG and data state is in the
             jit run's steps)
and the ratios jit/baseline of redone and of step_s (the exchange's cost).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from burstd.testbed.procs import kill_tree, start_local_nodes, wait_for_step


def _newest(ckpt: Path) -> tuple[int, str] | None:
    done = [(int(p.name[5:]), json.loads((p / "burstd-checkpoint.json").read_text())["reason"])
            for p in ckpt.glob("step-?????????") if (p / "burstd-checkpoint.json").exists()]
    return max(done) if done else None


def run_once(work: Path, width: int, ckpt_every: int, kill_at: int, jit: bool, steps: int) -> dict:
    ckpt, logs = work / "ckpt", [work / "node0.log", work / "node1.log"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               BURSTD_COLLECTIVE_TIMEOUT_S="30")
    train = ["-m", "burstd.train.example", "--steps", str(steps), "--seed", "1", "--size", str(width),
             "--ckpt-dir", str(ckpt), "--out", str(work / "final.pt"), "--ckpt-every", str(ckpt_every),
             "--step-sleep", "0.1", *([] if jit else ["--no-jit"])]
    procs = start_local_nodes([sys.executable, "-m", "burstd.train.launch"], train, logs, env=env, cwd=REPO)
    try:
        wait_for_step(logs[1], procs, kill_at)
        killed = time.time()
        kill_tree(procs[1], settle_s=0)
        durable_s = None
        while procs[0].poll() is None and time.time() < killed + 120:
            newest = _newest(ckpt)
            if durable_s is None and newest and newest[1] == "jit":
                durable_s = time.time() - killed
            time.sleep(0.01)
        exit_s = time.time() - killed
        if durable_s is None and (_newest(ckpt) or (0, ""))[1] == "jit":
            durable_s = exit_s
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p)
    text = logs[0].read_text() + logs[1].read_text()
    printed = [(int(s), float(t)) for s, t in re.findall(r"rank=0 step=(\d+) t=([\d.]+)", text)]
    steps_s = [b[1] - a[1] for a, b in zip(printed, printed[1:]) if b[0] == a[0] + 1 and a[0] >= 3]
    last = max(int(s) for s in re.findall(r"rank=\d step=(\d+) ", text))
    newest = _newest(ckpt)
    return {"jit": jit, "width": width, "redone": last - (newest[0] if newest else 0),
            "saved": newest, "durable_s": durable_s, "exit_s": exit_s,
            "step_s": statistics.median(steps_s) if steps_s else float("nan"), "survivor_rc": procs[0].returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="256,1024")
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--kill-at", type=int, default=17)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    rows = []
    for width in [int(w) for w in args.widths.split(",")]:
        pair = {}
        for jit in (False, True):
            with tempfile.TemporaryDirectory(prefix="bench-jit-") as d:
                row = run_once(Path(d), width, args.ckpt_every, args.kill_at, jit, args.steps)
            pair[jit] = row
            rows.append(row)
            durable = "n/a" if row["durable_s"] is None else f"{row['durable_s']:.2f}"
            print(f"width={width:5d} {'jit     ' if jit else 'baseline'} redone={row['redone']:3d} "
                  f"saved={row['saved']} durable_s={durable} exit_s={row['exit_s']:.2f} "
                  f"step_s={row['step_s']:.4f} survivor_rc={row['survivor_rc']}", flush=True)
        base, jit_row = pair[False], pair[True]
        print(f"width={width:5d} ratio jit/baseline: redone {jit_row['redone']}/{base['redone']} = "
              f"{jit_row['redone'] / max(base['redone'], 1):.2f}, step time "
              f"{jit_row['step_s'] / base['step_s']:.3f}", flush=True)
    return 0 if all(r["redone"] <= 1 for r in rows if r["jit"]) else 1


if __name__ == "__main__":
    sys.exit(main())
