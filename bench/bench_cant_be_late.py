"""burstd's spot -> on-demand escalation in the "Can't Be Late" setting (NSDI '24), against Uniform Progress and
the omniscient schedule, on the paper's published AWS availability traces.

    python bench/bench_cant_be_late.py --traces $BURSTD_SPOT_TRACES/skypilot_spot_traces \\
        [--deadlines-h 52,70] [--overhead-h 0.2] [--step-h 48] [--json] [--no-omniscient]

The setting: a 48 h job (``--work-h``), deadlines of 52 h and 70 h, a changeover of ``--overhead-h`` at each
start, p3.2xlarge prices (spot $0.918, on-demand $3.06 an hour). Traces: every file of
``availability/1-node/aws-10-26-2022`` (V100 and K80, 1 and 8 GPUs, us-west-2a/b, 10-minute ticks, read
1 = unavailable as the authors' simulator reads them: burstd.simulate.spot). The job starts every
``--step-h`` hours of each trace while the trace still covers its deadline. Each start is run by every
strategy of ``burstd.simulate.cant_be_late`` and solved by its omniscient programme in the same run; printed
per deadline and strategy: mean cost, deadline misses, and the ratios to on-demand-only and to the omniscient
cost (mean over the starts that met the deadline, the omniscient cost of the same starts as the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from burstd.simulate.cant_be_late import (
    Setting,
    burstd,
    burstd_deadline_declared,
    burstd_preemptions_only,
    burstd_reported_progress,
    burstd_reported_progress_deadline_declared,
    omniscient_cost,
    ondemand_only,
    replay,
    uniform_progress,
)
from burstd.simulate.spot import read_availability

TRACE_DIR = "availability/1-node/aws-10-26-2022"
# "burstd" is the shipped rule (a failed spot launch counts toward the escalation, issue 25); "deadline declared":
# a job that declares its deadline (sbatch --deadline), so decide() also applies its safety net; the last row is
# the rule before issue 25's fix, kept for the comparison
STRATEGIES = {"burstd": burstd, "burstd, progress reported": burstd_reported_progress,
              "burstd, deadline declared": burstd_deadline_declared,
              "burstd, progress reported, deadline declared": burstd_reported_progress_deadline_declared,
              "uniform-progress": uniform_progress, "ondemand-only": ondemand_only,
              "burstd, preemptions only (before #25)": burstd_preemptions_only}


def run(root: Path, deadlines_h: list[float], work_h: float, overhead_h: float, step_h: float,
        omniscient: bool = True) -> dict:
    files = sorted((root / TRACE_DIR).glob("*.json"))
    if not files:
        raise SystemExit(f"no traces under {root / TRACE_DIR}")
    out: dict = {"traces": [f.name for f in files], "work_h": work_h, "overhead_h": overhead_h, "step_h": step_h,
                 "deadlines": {}}
    for d_h in deadlines_h:
        st = Setting(work_s=work_h * 3600, deadline_s=d_h * 3600, overhead_s=overhead_h * 3600)
        rows: dict[str, list] = {name: [] for name in STRATEGIES}
        omni: list[float | None] = []
        t0 = time.process_time()
        for f in files:
            avail, gap = read_availability(f)
            need = int(st.deadline_s // gap) + 1
            step = max(1, int(step_h * 3600 // gap))
            for start in range(0, len(avail) - need + 1, step):
                window = avail[start:]
                omni.append(omniscient_cost(window, gap, st, time_limit_s=30.0) if omniscient else None)
                for name, fn in STRATEGIES.items():
                    rows[name].append(replay(window, gap, st, fn))
        res: dict = {"starts": len(omni), "omniscient_cpu_s": round(time.process_time() - t0, 1),
                     "ondemand_only_usd": round(st.ondemand_only_usd, 2), "strategies": {}}
        ok_omni = [o for o in omni if o is not None]
        res["omniscient_mean_usd"] = round(statistics.fmean(ok_omni), 2) if ok_omni else None
        for name, outs in rows.items():
            met = [(o, b) for o, b in zip(outs, omni) if o.met_deadline and (b is not None or not omniscient)]
            res["strategies"][name] = {
                "mean_usd": round(statistics.fmean(o.cost_usd for o in outs if o.finish_s != float("inf")), 2)
                if any(o.finish_s != float("inf") for o in outs) else None,
                "missed": sum(1 for o in outs if not o.met_deadline),
                "never_finished": sum(1 for o in outs if o.finish_s == float("inf")),
                "vs_ondemand_only": round(statistics.fmean(o.cost_usd for o, _ in met) / st.ondemand_only_usd, 3)
                if met else None,
                "vs_omniscient": round(sum(o.cost_usd for o, _ in met) / sum(b or 0.0 for _, b in met), 3)
                if met and omniscient else None,
                "preemptions_mean": round(statistics.fmean(o.preemptions for o in outs), 2),
            }
        out["deadlines"][f"{d_h:g}h"] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = os.environ.get("BURSTD_SPOT_TRACES")
    ap.add_argument("--traces", default=default, help="the skypilot_spot_traces folder [$BURSTD_SPOT_TRACES]")
    ap.add_argument("--deadlines-h", default="52,70")
    ap.add_argument("--work-h", type=float, default=48.0)
    ap.add_argument("--overhead-h", type=float, default=0.2)
    ap.add_argument("--step-h", type=float, default=48.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-omniscient", action="store_true",
                    help="skip the integer programmes (seconds instead of minutes; no 'x omniscient' column)")
    a = ap.parse_args()
    if not a.traces:
        ap.error("--traces (or BURSTD_SPOT_TRACES) names the skypilot_spot_traces folder")
    root = Path(a.traces)
    if root.name != "skypilot_spot_traces" and (root / "skypilot_spot_traces").is_dir():
        root = root / "skypilot_spot_traces"
    try:
        out = run(root, [float(x) for x in a.deadlines_h.split(",")], a.work_h, a.overhead_h, a.step_h,
                  omniscient=not a.no_omniscient)
    except ValueError as exc:
        sys.exit(str(exc))
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"Can't Be Late: {a.work_h:g} h job, changeover {a.overhead_h:g} h, {len(out['traces'])} traces, "
          f"a start every {a.step_h:g} h")
    for dl, res in out["deadlines"].items():
        print(f"\ndeadline {dl}: {res['starts']} starts; on-demand only ${res['ondemand_only_usd']}, omniscient "
              f"mean ${res['omniscient_mean_usd']} (its programme: {res['omniscient_cpu_s']} CPU-s)")
        print(f"{'strategy':46} {'mean $':>8} {'missed':>6} {'x on-demand':>11} {'x omniscient':>12} {'preempt':>7}")
        for name, r in res["strategies"].items():
            print(f"{name:46} {r['mean_usd']!s:>8} {r['missed']:>6} {r['vs_ondemand_only']!s:>11} "
                  f"{r['vs_omniscient']!s:>12} {r['preemptions_mean']:>7}")


if __name__ == "__main__":
    main()
