"""decide() over 10,000 / 100,000 pending jobs and 1,000 / 10,000 nodes: time per cycle and growth.

    python bench/bench_decide.py            # prints a table and the growth ratios

Two baselines, measured in the same run on the same queue: the least any policy must do (sort the
pending jobs by priority), and the previous implementation (``bench/decide_v1.py``, a frozen copy of
decide() before the speed work; its decisions and explanations are checked equal to decide()'s with the
value-of-waiting and Uniform Progress rules off, which it predates). Growth ratio =
time(10x input) / time(input); linear is 10.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import decide_v1
from decide_world import world

from burstd.policy.decide import decide


REPEAT = 3


def best_of(fn, n=None):
    n = n or REPEAT
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(pending: int, nodes: int) -> dict:
    snap, leases, book, cfg = world(pending, nodes)
    base = best_of(lambda: sorted((j for j in snap.jobs if j.is_pending),
                                  key=lambda j: (-j.priority, j.submit_time or 0, j.job_id)))
    full = best_of(lambda: decide(snap, leases, book, None, cfg))
    fast = best_of(lambda: decide(snap, leases, book, None, cfg, explain=False))
    # the frozen copy runs, and is checked equal to decide(), with issue 10's rules off (no value of waiting, the
    # fixed preemption count, the plain market ranking): the rules it knows; decide() is timed on the defaults
    pol = cfg.policy
    legacy = cfg.model_copy(update={"policy": pol.model_copy(update={
        "max_preemptions_spot": 2, "progress_slack": 0.0, "risk_aware_market": False,
        "waiting": pol.waiting.model_copy(update={"wait_value_per_hour": 0.0})})})
    old = best_of(lambda: decide_v1.decide(snap, leases, book, None, legacy))
    d = decide(snap, leases, book, None, legacy)
    d1 = decide_v1.decide(snap, leases, book, None, legacy)
    same = (d.eligible == d1.eligible and d.revoke == d1.revoke and d.prewarm == d1.prewarm
            and d.release == d1.release and dict(d.explanations.items()) == d1.explanations)
    return {"pending": pending, "nodes": nodes, "decide_s": round(full, 4),
            "decide_no_explain_s": round(fast, 4), "sort_baseline_s": round(base, 4),
            "vs_sort": round(full / base, 1), "v1_s": round(old, 4),
            "speedup_vs_v1": round(old / full, 2), "same_as_v1": same, "eligible": len(decide(snap, leases, book, None, cfg).eligible),
            "explanations": len(d.explanations)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Prints one line per size, the growth ratio, then the figures as JSON.")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept (default 3)")
    a = ap.parse_args()
    global REPEAT
    REPEAT = max(1, a.repeat)
    rows = [measure(p, n) for p, n in ((10_000, 1_000), (100_000, 10_000))]
    for r in rows:
        print(f"{r['pending']:>7} pending {r['nodes']:>6} nodes: decide {r['decide_s'] * 1000:8.1f} ms "
              f"(no explanations {r['decide_no_explain_s'] * 1000:7.1f} ms), sort baseline "
              f"{r['sort_baseline_s'] * 1000:6.1f} ms, x{r['vs_sort']} of sort; v1 {r['v1_s'] * 1000:7.1f} ms "
              f"(x{r['speedup_vs_v1']} faster, same decisions: {r['same_as_v1']}); {r['eligible']} eligible")
    growth = rows[1]["decide_s"] / rows[0]["decide_s"]
    base_growth = rows[1]["sort_baseline_s"] / rows[0]["sort_baseline_s"]
    print(f"growth for 10x input: decide x{growth:.1f}, sort baseline x{base_growth:.1f} (linear = 10)")
    print(json.dumps({"rows": rows, "growth_decide": round(growth, 2), "growth_sort": round(base_growth, 2)}))


if __name__ == "__main__":
    main()
