"""Write the two small traces the pinned-replay test replays (``tests/unit/simulate/test_replay_pinned.py``).

    python tests/data/simulate/make_mini_traces.py   # rewrites mini.swf and mini_philly.csv beside it

Synthetic, from a fixed seed: a 64-CPU SWF site loaded past capacity (so jobs queue, burst, and get
preempted on spot) and a 64-GPU Philly-format trace. Rewriting them changes the pinned figures.
"""

from __future__ import annotations

import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def swf(n: int = 300, seed: int = 25) -> str:
    rng = random.Random(seed)
    lines = ["; Synthetic SWF trace for burstd's pinned-replay test", "; MaxNodes: 8", "; MaxProcs: 64"]
    t = 0
    for i in range(1, n + 1):
        t += int(rng.expovariate(1 / 240))
        run = int(rng.choice((60, 300, 900, 3600, 7200, 14400)) * rng.uniform(0.2, 1.0)) + 1
        req = int(run * rng.choice((1.0, 1.5, 3.0)))
        procs = rng.choice((1, 2, 4, 8, 8, 16, 32, 64))
        user = rng.randrange(1, 9)
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 {procs} {req} -1 1 {user} {user} -1 -1 -1 -1 -1")
    return "\n".join(lines) + "\n"


def philly(n: int = 250, seed: int = 26) -> str:
    rng = random.Random(seed)
    lines = ["#job id,arrival time (sec),topology,shape,size,duration (sec)"]
    t = 0.0
    for i in range(n):
        t += round(rng.expovariate(1 / 300), 1)
        size = rng.choice((1, 1, 1, 2, 4, 8, 8, 16))
        dur = float(int(rng.choice((600, 3600, 14400, 43200)) * rng.uniform(0.1, 1.0)) + 1)
        lines.append(f"{i},{t:.1f},CLOS,1,{size},{dur:.1f}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (HERE / "mini.swf").write_text(swf())
    (HERE / "mini_philly.csv").write_text(philly())
