"""Starburst's own simulator on our Philly CSV, beside ``burstctl simulate --setting starburst``.

    python bench/starburst_reference.py --starburst /path/to/starburst [--limit-jobs N] [--warmup-jobs N]
        [--run zero-1:0:-1 --run linear_cost-0.076:0:-1 --run linear_cost-0.076:1:30]

``--starburst`` is a checkout of github.com/michaelzhiluo/starburst (the folder that holds ``skyburst/``);
nothing of it is copied here. Each ``--run`` is ``WAITING_POLICY:LOOP:MAX_QUEUE_LENGTH`` as in its
``run_simulator_sweep.py`` (-1: no queue cap). The RFold CSV's rows become Starburst jobs the way its
``process_philly_jobs`` builds them (arrival and run time in hours, cost = GPUs x hours), on 232 nodes x 8
GPUs, FIFO, first fit, warm-up 5,000 jobs. Its progress bar and table printer (tqdm, tabulate) and the
trace-loader imports it does not use here (pandas, dateutil) are stubbed when missing. Prints one JSON line
a run: cloud GPU-hours and mean JCT (hours), then cost and JCT relative to the first run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.public_traces import public_trace  # noqa: E402

# the whole Philly CSV under BURSTD_TRACES (examples/traces/README.md: where to get it), else the in-repo sample
DEFAULT_TRACE = public_trace("gpu/philly_trace_rfold.csv.gz")
DEFAULT_RUNS = ["zero-1:0:-1", "linear_cost-0.076:0:-1", "linear_cost-0.076:1:30"]


def _stub_missing() -> None:
    """Stand-ins for modules the simulator imports only for its progress bar, its table print, and trace
    loaders this script does not call."""
    for name in ("tqdm", "tabulate", "pandas", "dateutil"):
        try:
            __import__(name)
        except ImportError:
            mod = types.ModuleType(name)
            if name == "tqdm":
                mod.tqdm = type("tqdm", (), {"__init__": lambda self, *a, **k: None,  # type: ignore[attr-defined]
                                             "update": lambda self, n=1: None})
            elif name == "tabulate":
                mod.tabulate = lambda data, headers=(): ""  # type: ignore[attr-defined]
            elif name == "dateutil":
                mod.parser = types.ModuleType("dateutil.parser")  # type: ignore[attr-defined]
                sys.modules["dateutil.parser"] = mod.parser  # type: ignore[attr-defined]
            sys.modules[name] = mod


def rows(path: Path, limit: int | None) -> list[tuple[float, int, float]]:
    out = []
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            r = line.strip().split(",")
            g, d = int(float(r[4])), float(r[5])
            if g > 0 and d > 0:  # the rows burstd's reader keeps
                out.append((float(r[1]), g, d))
    out.sort(key=lambda x: x[0])
    return out[:limit] if limit else out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starburst", required=True, type=Path, help="checkout holding skyburst/")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--limit-jobs", type=int, default=None)
    ap.add_argument("--warmup-jobs", type=int, default=5000)
    ap.add_argument("--run", action="append", help=f"POLICY:LOOP:MAXQ [default: {' '.join(DEFAULT_RUNS)}]")
    a = ap.parse_args()
    if not (a.starburst / "skyburst" / "simulator.py").is_file():
        sys.exit(f"--starburst {a.starburst}: no skyburst/simulator.py there")
    _stub_missing()
    sys.path.insert(0, str(a.starburst))
    from skyburst.job import Job  # type: ignore[import-not-found]
    from skyburst.simulator import run_simulator  # type: ignore[import-not-found]

    data = rows(a.trace, a.limit_jobs)
    t0 = data[0][0]
    first = None
    for spec in a.run or DEFAULT_RUNS:
        pol, loop, maxq = spec.split(":")
        jobs = [Job(i, arrival=(s - t0) / 3600.0, runtime=d / 3600.0, resources={"GPUs": g}, cost=g * d / 3600.0)
                for i, (s, g, d) in enumerate(data)]
        t = time.perf_counter()
        res = run_simulator(jobs, {"cluster_size": 232, "gpus_per_node": 8, "cpus_per_node": 48,
                                   "sched_alg": "fifo", "waiting_policy": pol, "loop": int(loop),
                                   "max_queue_length": int(maxq), "warmup_jobs": a.warmup_jobs})
        st = res["stats"]
        row = {"run": spec, "jobs": len(data), "cloud_gpu_hours": round(st["total_cloud_cost"], 1),
               "jct_mean_h": round(st["avg_jct"], 4), "system_utilization": round(st["system_utilization"], 4),
               "wall_s": round(time.perf_counter() - t, 1)}
        if first is None:
            first = row
        elif first["cloud_gpu_hours"]:
            row["cost_vs_first"] = round(row["cloud_gpu_hours"] / first["cloud_gpu_hours"] - 1, 4)
            row["jct_vs_first"] = round(row["jct_mean_h"] / first["jct_mean_h"] - 1, 4)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
