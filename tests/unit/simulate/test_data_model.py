"""Issue 24 item 4: the simulator replays a trace with a data-size model, and decide() weighs the data."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.simulate.data_model import DataModel
from burstd.simulate.report import simulate_trace
from tests.unit.simulate.test_replay_pinned import DATA, spot_dir


def test_the_model_is_reproducible_and_shares_datasets():
    m = DataModel(50.0, seed=3)
    assert m.needs(7) == DataModel(50.0, seed=3).needs(7)
    shared = [m.needs(j).inputs[0] for j in range(200) if m.needs(j).inputs[0].digest]
    assert 60 < len(shared) < 140 and len({i.digest for i in shared}) == 5  # half the jobs, five datasets
    assert all(i.size_bytes == next(s for s in shared if s.digest == i.digest).size_bytes for i in shared)
    assert DataModel(0.0).needs(1).input_bytes == 0


def test_more_data_costs_more_and_keeps_more_jobs_home(tmp_path):
    root = spot_dir(tmp_path)

    def burstd_row(median):
        rep = simulate_trace(DATA / "mini.swf", spot_root=root, onprem_cpus=64, policies=["burstd"],
                             data_median_gb=median)
        return rep["policies"]["burstd"]

    none, small, big = burstd_row(None), burstd_row(1.0), burstd_row(200.0)
    assert "data" not in none
    assert 0 < small["data"]["usd"] < big["data"]["usd"]
    assert small["data"]["cache_hits"] > 0
    assert big["data"]["jobs_kept_home_for_data"] > small["data"]["jobs_kept_home_for_data"]
    assert big["jct_mean_s"] > none["jct_mean_s"] and big["cloud_cost_usd"] > none["cloud_cost_usd"]


def test_burstctl_simulate_takes_the_data_model(tmp_path):
    out = CliRunner().invoke(app, ["simulate", "--trace", str(DATA / "mini.swf"), "--onprem-cpus", "64",
                                   "--policy", "burstd", "--spot-traces", str(spot_dir(tmp_path)),
                                   "--data-median-gb", "10", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["data_model"]["median_gb"] == 10.0 and report["policies"]["burstd"]["data"]["gb_in"] > 0
