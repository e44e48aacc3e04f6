"""Sweep burstd's policy knobs on a training prefix of a trace (docs/policy.md, "How the defaults were tuned").

    python bench/tune_policy.py TRACE --limit-jobs 20000 --grid wait_value_per_hour=0.1,0.3 [--market on-demand]

A knob is a ``[policy.waiting]`` key or a ``[policy]`` key (e.g. ``progress_slack``); ``--market``, ``--boot-s``
and ``--onprem-gpus``/``--onprem-cpus`` are those of ``burstctl simulate``.

Prints one line per setting: cost and mean wait, next to the constant-wait and compute-wait baselines
(their knobs are fixed, never tuned here).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burstd.simulate.policies import make_setup, run_policy  # noqa: E402
from burstd.simulate.report import default_spot_root  # noqa: E402
from burstd.simulate.traces import read_trace  # noqa: E402


def run(args):
    path, limit, name, knobs, site = args
    jobs, info = read_trace(path, limit_jobs=limit)
    setup = make_setup(info, info.format == "philly", None, site["cpus"], site["gpus"], default_spot_root(),
                       boot_s=site["boot_s"], market=site["market"])
    if knobs:
        cfg = setup.config
        wk = {k: v for k, v in knobs.items() if k in type(cfg.policy.waiting).model_fields}
        pk = {k: v for k, v in knobs.items() if k not in wk}
        unknown = [k for k in pk if k not in type(cfg.policy).model_fields]
        if unknown:
            raise SystemExit(f"unknown knob(s): {', '.join(unknown)}")
        w = cfg.policy.waiting.model_copy(update=wk)
        setup.config = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={**pk, "waiting": w})})
    r = run_policy(name, setup, jobs)
    return (name, knobs, round(r.cloud_cost_usd, 1), round(r.wait_mean_s, 1), r.jobs_burst, r.preemptions,
            round(r.jct_mean_s, 1), round(r.delay_mean_s, 1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--limit-jobs", type=int, default=20000)
    ap.add_argument("--grid", action="append", default=[], help="knob=v1,v2 (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sweep-policy", default="burstd", help="which policy the grid applies to")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--market", choices=("on-demand", "spot"), default=None)
    ap.add_argument("--boot-s", type=float, default=120.0)
    ap.add_argument("--onprem-gpus", type=int, default=None)
    ap.add_argument("--onprem-cpus", type=int, default=None)
    a = ap.parse_args()
    site = {"market": a.market, "boot_s": a.boot_s, "gpus": a.onprem_gpus, "cpus": a.onprem_cpus}
    axes = [(k, [float(x) for x in v.split(",")]) for k, v in (g.split("=", 1) for g in a.grid)]
    tasks = [] if a.no_baselines else [(a.trace, a.limit_jobs, b, {}, site)
                                       for b in ("ondemand-all", "constant-wait", "compute-wait")]
    for combo in itertools.product(*[vals for _, vals in axes]):
        tasks.append((a.trace, a.limit_jobs, a.sweep_policy, {k: v for (k, _), v in zip(axes, combo)}, site))
    with ProcessPoolExecutor(a.workers) as ex:
        for name, knobs, cost, wait, nb, pre, jct, delay in ex.map(run, tasks):
            print(json.dumps({"policy": name, "knobs": knobs, "cost": cost, "jct_mean_s": jct, "delay_mean_s": delay,
                              "wait_mean_s": wait, "burst": nb, "preemptions": pre}), flush=True)


if __name__ == "__main__":
    main()
