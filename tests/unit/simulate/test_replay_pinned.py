"""A small replay's figures, pinned: the simulator's event semantics must not drift when it is made faster.

Two synthetic traces shipped in ``tests/data/simulate`` (``make_mini_traces.py`` wrote them): a 64-CPU SWF
site loaded past capacity and a 64-GPU Philly-format trace, replayed under every built-in policy with a
small spot trace written here (so nothing depends on ``shared/``). The pins were taken from the simulator
before the speed work (issue 25, item 3) and still hold after it: any change to an event's order, a cost
or a wait shows up here to the cent and the second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burstd.simulate.report import simulate_trace
from burstd.simulate.spot import CPU_TRACES, GPU_TRACES

DATA = Path(__file__).resolve().parents[2] / "data" / "simulate"
FIELDS = ("cloud_cost_usd", "jct_mean_s", "wait_mean_s", "jobs_burst", "preemptions", "lost_node_hours")


def spot_dir(tmp_path: Path) -> Path:
    """A spot trace folder in the layout ``SpotModel.from_dir`` reads: one node alive 30-90 min at a time."""
    data = ([1] * 3 + [0]) * 5 + ([1] * 9 + [0]) * 3 + [1] * 6 + [0]
    for sub in CPU_TRACES + GPU_TRACES:
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub / "node.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return tmp_path


def figures(trace: str, spot_root: Path, **kw) -> dict[str, list]:
    rep = simulate_trace(DATA / trace, spot_root=spot_root, **kw)
    return {p: [round(row[f], 2) if isinstance(row[f], float) else row[f] for f in FIELDS]
            for p, row in rep["policies"].items()}


# case: {policy: [cloud cost USD, mean JCT s, mean wait s, jobs burst, preemptions, lost node-hours]}
PINNED: dict[str, dict[str, list]] = {
    "philly-spot": {
        "never": [0.0, 42185.16, 33526.5, 0, 0, 0.0],
        "ondemand-all": [5145.57, 8735.33, 76.67, 104, 0, 0.0],
        "spot-all": [186.16, 38151.08, 29492.42, 212, 388, 25.29],
        "constant-wait": [4306.99, 18053.04, 9394.38, 75, 25, 1.55],
        "compute-wait": [5038.8, 10349.17, 1690.51, 117, 56, 3.12],
        "burstd": [4451.27, 9942.91, 1284.25, 146, 71, 3.75],
    },
    "philly-starburst": {
        "never": [0.0, 74728.8, 65922.35, 0, 0, 0.0],
        "ondemand-all": [5058.23, 8833.54, 27.08, 96, 0, 0.0],
        "spot-all": [5058.23, 8833.54, 27.08, 96, 0, 0.0],
        "constant-wait": [5080.28, 12078.98, 3272.52, 90, 0, 0.0],
        "compute-wait": [4328.02, 11354.63, 2548.17, 194, 0, 0.0],
        "burstd": [4110.66, 9927.61, 1121.15, 190, 0, 0.0],
    },
    "philly-starburst-loop": {
        "never": [0.0, 41883.55, 33077.09, 0, 0, 0.0],
        "ondemand-all": [5046.23, 8832.79, 26.33, 87, 0, 0.0],
        "spot-all": [5046.23, 8832.79, 26.33, 87, 0, 0.0],
        "constant-wait": [5164.31, 10481.37, 1674.91, 77, 0, 0.0],
        "compute-wait": [3701.93, 11235.42, 2428.96, 119, 0, 0.0],
        "burstd": [3801.16, 9891.55, 1085.09, 112, 0, 0.0],
    },
    "swf-first-fit-fifo": {
        "never": [0.0, 138018.74, 135429.4, 0, 0, 0.0],
        "ondemand-all": [122.39, 2665.53, 76.19, 125, 0, 0.0],
        "spot-all": [8.04, 98353.12, 95763.78, 293, 435, 21.21],
        "constant-wait": [137.66, 17091.07, 14501.72, 209, 45, 1.15],
        "compute-wait": [127.35, 5478.53, 2889.18, 275, 120, 3.31],
        "burstd": [120.14, 2831.95, 242.6, 172, 29, 0.51],
    },
    "swf-on-demand": {
        "never": [0.0, 32482.38, 29893.03, 0, 0, 0.0],
        "ondemand-all": [121.54, 2657.9, 68.55, 111, 0, 0.0],
        "spot-all": [121.54, 2657.9, 68.55, 111, 0, 0.0],
        "constant-wait": [99.44, 9524.04, 6934.69, 66, 0, 0.0],
        "compute-wait": [105.68, 4243.69, 1654.34, 173, 0, 0.0],
        "burstd": [115.94, 2741.45, 152.1, 144, 0, 0.0],
    },
    "swf-spot": {
        "never": [0.0, 32482.38, 29893.03, 0, 0, 0.0],
        "ondemand-all": [121.54, 2657.9, 68.55, 111, 0, 0.0],
        "spot-all": [6.83, 28372.69, 25783.34, 236, 365, 17.05],
        "constant-wait": [102.25, 9544.48, 6955.14, 69, 21, 0.79],
        "compute-wait": [109.69, 4771.71, 2182.36, 187, 75, 2.44],
        "burstd": [117.41, 2745.33, 155.98, 144, 19, 0.2],
    },
}


@pytest.mark.parametrize("case", sorted(PINNED))
def test_a_small_replay_gives_the_pinned_figures(case, tmp_path):
    trace, kw = CASES[case]
    assert figures(trace, spot_dir(tmp_path), **kw) == PINNED[case]


CASES: dict[str, tuple[str, dict]] = {
    "swf-spot": ("mini.swf", {}),
    "swf-on-demand": ("mini.swf", {"market": "on-demand"}),
    "swf-first-fit-fifo": ("mini.swf", {"placement": "first-fit", "backfill_depth": 0}),
    "philly-spot": ("mini_philly.csv", {"onprem_gpus": 64}),
    "philly-starburst": ("mini_philly.csv", {"setting": "starburst", "onprem_gpus": 64, "warmup_jobs": 20}),
    "philly-starburst-loop": ("mini_philly.csv", {"setting": "starburst", "onprem_gpus": 64, "warmup_jobs": 20,
                                                  "out_of_order": True, "market": "on-demand"}),
}
