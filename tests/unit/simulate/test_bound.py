"""The hindsight lower bound (``burstctl simulate --bound``): below every replay's cost at its mean JCT."""

from __future__ import annotations

import pytest

from burstd.simulate.policies import POLICIES, make_setup, policy_simulator
from burstd.simulate.traces import TraceInfo, TraceJob

pytest.importorskip("highspy")
from burstd.simulate.bound import build_bound

INFO = TraceInfo("swf", max_procs=16, max_nodes=2)  # two 8-CPU nodes on-prem


def trace() -> list[TraceJob]:
    # a burst of work that queues for hours on-prem, then quiet
    jobs = [TraceJob(i, 60.0 * i, 3600.0 * (1 + i % 3), 3600.0 * (1 + i % 3), 8) for i in range(1, 13)]
    return jobs + [TraceJob(20 + i, 20 * 3600.0 + 600.0 * i, 900.0, 1800.0, 4) for i in range(6)]


def setup(market: str | None):
    return make_setup(INFO, False, None, None, None, None, market=market)


@pytest.mark.parametrize("market", [None, "on-demand"])
def test_no_policy_replays_below_the_bound_at_its_own_mean_jct(market):
    s = setup(market)
    model = build_bound(s, trace())
    results = {name: policy_simulator(name, s, trace()).run() for name in POLICIES}
    for name, res in results.items():
        bound = model.cost_at(res.jct_mean_s)
        assert bound is not None, name
        assert bound <= res.cloud_cost_usd + 1e-6, name
    # never bursting is free and the LP (which may reorder on-prem work in hindsight) is at least as fast
    assert model.cost_at(results["never"].jct_mean_s) == pytest.approx(0.0, abs=1e-6)
    # the fastest schedule needs the cloud, so the bound there is not zero
    assert model.cost_at(results["ondemand-all"].jct_mean_s) > 0


def test_the_bound_falls_as_the_mean_jct_allowed_grows_and_none_below_the_least_possible():
    model = build_bound(setup(None), trace())
    costs = [model.cost_at(model.min_mean_jct_s * f) for f in (1.0, 1.2, 1.5, 2.0, 3.0)]
    assert all(c is not None for c in costs)
    assert costs == sorted(costs, reverse=True) and costs[0] > costs[-1]
    assert model.cost_at(model.min_mean_jct_s * 0.99) is None


def test_bound_in_the_json_is_one_figure_per_policy_and_the_output_stays_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from burstd.cli.app import app
    from tests.unit.simulate.test_simulate_cli import SWF, calm_spot_traces

    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--bound", "--hindsight", "--policy",
                                 "never,ondemand-all,burstd", "--spot-traces", str(calm_spot_traces(tmp_path / "s"))])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["policies"]
    assert rows["never"]["bound_usd"] == 0.0
    assert rows["never"]["hindsight_usd"] == 0.0
    for row in rows.values():
        assert row["bound_usd"] is not None and row["bound_usd"] <= row["cloud_cost_usd"] + 0.01
        # the optimum lies between the bound and the cheapest hindsight plan found under the site's scheduler
        assert row["hindsight_usd"] is not None and row["bound_usd"] <= row["hindsight_usd"] + 0.01
    assert rows["ondemand-all"]["hindsight_usd"] <= rows["ondemand-all"]["cloud_cost_usd"] + 0.01


def test_whole_jobs_to_the_cloud_tighten_the_bound_to_a_whole_jobs_bill():
    # two one-hour jobs that each fill the 8-CPU site: at a mean JCT between never-burst's and bursting one,
    # the LP bursts a fraction of the second job; no policy can, so the MIP pays for all of it
    info = TraceInfo("swf", max_procs=8, max_nodes=1)
    jobs = [TraceJob(1, 0.0, 3600.0, 3600.0, 8), TraceJob(2, 0.0, 3600.0, 3600.0, 8)]
    s = make_setup(info, False, None, None, None, None)
    target = 4_900.0  # never bursting: about (3,600 + 7,200) / 2; one job to the cloud: (3,600 + 3,720) / 2
    lp = build_bound(s, jobs, integral=False).cost_at(target)
    mip_model = build_bound(s, jobs, time_limit_s=30.0)
    mip = mip_model.cost_at(target)
    one_job = 0.146 * (s.boot_s + 3600.0) / 3600.0  # the cheapest node-hour (spot c5.2xlarge), boot + run
    assert lp is not None and mip is not None
    assert 0 < lp < 0.8 * one_job
    assert mip == pytest.approx(one_job, rel=1e-3)
    # a second solve on the same model (the JCT row moved) still answers: the time limit is a solve's
    assert mip_model.cost_at(7_000.0) == pytest.approx(0.0, abs=1e-6)
    assert mip_model.cost_at(target) == pytest.approx(one_job, rel=1e-3)


def test_a_bound_proven_at_a_slower_policys_jct_carries_to_a_faster_one(monkeypatch):
    # branch and bound stopped early may prove less at the tighter JCT: the report takes the larger
    from burstd.simulate import bound as bound_mod
    from burstd.simulate.report import _add_bound

    class Model:
        integral, slot_s, window_slots, min_mean_jct_s = True, 900.0, 96, 100.0

        def cost_at(self, jct):
            return {1000.0: 50.0, 2000.0: 80.0, 3000.0: 0.0}[jct]

    monkeypatch.setattr(bound_mod, "build_bound", lambda *a, **k: Model())
    out = {"policies": {"fast": {"jct_mean_s": 1000.0, "cloud_cost_usd": 200.0},
                        "mid": {"jct_mean_s": 2000.0, "cloud_cost_usd": 100.0},
                        "never": {"jct_mean_s": 3000.0, "cloud_cost_usd": 0.0}}}
    _add_bound(out, None, [], 1.0)
    rows = out["policies"]
    assert [rows[n]["bound_usd"] for n in ("fast", "mid", "never")] == [80.0, 80.0, 0.0]
    assert rows["fast"]["cost_vs_bound"] == 2.5
