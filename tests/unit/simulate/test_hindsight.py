"""The hindsight plan (``burstctl simulate --bound``): an achieved schedule under the site's own scheduler, so
the optimum at a mean JCT lies between the bound and it."""

from __future__ import annotations

import pytest

from burstd.simulate.hindsight import Hindsight
from burstd.simulate.policies import POLICIES, make_setup, policy_simulator
from burstd.simulate.traces import TraceInfo, TraceJob
from tests.unit.simulate.test_bound import INFO, setup, trace


def results(s):
    return {name: policy_simulator(name, s, trace()).run() for name in POLICIES}


@pytest.mark.parametrize("market", [None, "on-demand"])
def test_every_plan_meets_its_target_and_replays_to_what_it_reports(market):
    s = setup(market)
    h = Hindsight(s, trace())
    for name, res in results(s).items():
        plan = h.plan_for(res.jct_mean_s, time_s=30.0)
        assert plan is not None, name
        assert plan.mean_jct_s <= res.jct_mean_s, name
        again = h.replay(plan.jobs)
        assert (again.cost_usd, again.mean_jct_s) == (plan.cost_usd, plan.mean_jct_s), name
        # planned jobs are billed on-demand for boot + run, at most once each
        assert plan.cost_usd <= sum(h.bill[i] for i in plan.jobs) + 1e-6, name


def test_at_never_bursts_mean_jct_the_plan_is_empty_and_free():
    s = setup(None)
    never = policy_simulator("never", s, trace()).run()
    plan = Hindsight(s, trace()).plan_for(never.jct_mean_s)
    assert plan is not None and plan.jobs == frozenset() and plan.cost_usd == 0.0


def test_the_plan_is_the_cheapest_way_to_its_target_it_found_taking_back_any_one_job_misses_it():
    s = setup("on-demand")
    res = results(s)
    target = (res["never"].jct_mean_s + res["ondemand-all"].jct_mean_s) / 2
    h = Hindsight(s, trace())
    plan = h.plan_for(target, time_s=30.0)
    assert plan is not None and 0 < plan.cost_usd < res["ondemand-all"].cloud_cost_usd
    for i in plan.jobs:
        assert h.replay(plan.jobs - {i}).mean_jct_s > target, i


def test_the_optimum_is_bracketed_bound_below_plan_above():
    pytest.importorskip("highspy")
    from burstd.simulate.bound import build_bound

    s = setup("on-demand")
    model = build_bound(s, trace())
    h = Hindsight(s, trace())
    for name, res in results(s).items():
        plan, bound = h.plan_for(res.jct_mean_s, time_s=30.0), model.cost_at(res.jct_mean_s)
        assert plan is not None and bound is not None, name
        assert bound <= plan.cost_usd + 1e-6, name


def test_a_planned_job_the_site_starts_before_its_cycle_runs_on_prem_for_nothing():
    # an idle site starts the job at once, before the plan's first cycle: no burst, no bill
    s = make_setup(INFO, False, None, None, None, None, market="on-demand")
    jobs = [TraceJob(1, 10.0, 3600.0, 3600.0, 8)]
    h = Hindsight(s, jobs)
    got = h.replay(frozenset({1}))
    assert got.cost_usd == 0.0 and got.waits == {1: 0.0}
    # a job that must queue is burst at the next cycle (120 s), billed for boot + run on-demand
    busy = [TraceJob(1, 0.0, 7200.0, 7200.0, 16), TraceJob(2, 10.0, 3600.0, 3600.0, 8)]
    h = Hindsight(s, busy)
    got = h.replay(frozenset({2}))
    assert 2 not in got.waits
    assert got.cost_usd == pytest.approx(h.bill[2], rel=1e-3)
    assert got.mean_jct_s == pytest.approx((7200.0 + (120.0 - 10.0 + s.boot_s + 3600.0)) / 2)


def test_the_prune_takes_back_what_the_grow_overshot():
    # one 8-CPU site, busy 10 h with A; B1 (1 h) and then B2 (10 h) queue behind it. Bursting B1 alone sheds
    # more than its own wait (B2 starts an hour sooner), which the grow's estimate does not count: so it sends
    # B2 too, and the prune, dearest first, takes B2 back because B1 alone meets the target
    info = TraceInfo("swf", max_procs=8, max_nodes=1)
    s = make_setup(info, False, None, None, None, None, market="on-demand")
    jobs = [TraceJob(1, 0.0, 36_000.0, 36_000.0, 8), TraceJob(2, 60.0, 3600.0, 3600.0, 8),
            TraceJob(3, 120.0, 36_000.0, 36_000.0, 8)]
    h = Hindsight(s, jobs)
    assert h.replay(frozenset()).mean_jct_s == pytest.approx((36_000 + 39_540 + 75_480) / 3)
    assert h.replay(frozenset({2})).mean_jct_s == pytest.approx((36_000 + 3_780 + 71_880) / 3)
    plan = h.plan_for(38_000.0)
    assert plan is not None and plan.jobs == frozenset({2})
    assert plan.cost_usd == pytest.approx(h.bill[2], rel=1e-3)


def test_hindsight_alone_on_the_command_line_needs_no_solver_and_refuses_a_warm_up_cut(tmp_path):
    from typer.testing import CliRunner

    from burstd.cli.app import app
    from tests.unit.simulate.test_simulate_cli import SWF, calm_spot_traces

    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    spot = str(calm_spot_traces(tmp_path / "s"))
    args = ["simulate", "--trace", str(trace), "--policy", "never,burstd", "--spot-traces", spot, "--hindsight"]
    r = CliRunner().invoke(app, args + ["--wide"])
    assert r.exit_code == 0, r.output
    assert "cheapest plan found in hindsight under the site's own scheduler" in r.output
    assert "never $0.0" in r.output and "lower bound" not in r.output
    r = CliRunner().invoke(app, args + ["--warmup-jobs", "5"])
    assert r.exit_code != 0 and "--hindsight" in r.output and "--warmup-jobs 0" in r.output


def test_a_spot_pool_with_no_on_demand_price_is_never_planned():
    # planned at its spot price with no preemption it would be a schedule nobody can buy: the plan has no
    # pool for these jobs, so they stay on-prem and only never-burst's mean JCT is reachable
    from tests.unit.simulate.test_engine import CFG

    spot_only = CFG.model_copy(update={"pools": [CFG.pools[0].model_copy(update={"ondemand_price_per_hour": None})]})
    s = make_setup(INFO, False, spot_only, None, None, None)
    h = Hindsight(s, trace())
    assert h.pool == {}
    never = h.replay(frozenset())
    assert h.plan_for(never.mean_jct_s * 0.9) is None
    with_od = Hindsight(make_setup(INFO, False, CFG, None, None, None), trace())
    assert set(with_od.pool) == {j.job_id for j in trace()} and with_od.plan_for(never.mean_jct_s * 0.9) is not None


def test_a_pool_holds_at_most_its_node_count_at_once_and_a_job_wider_than_it_is_never_planned():
    from tests.unit.simulate.test_engine import CFG

    two = CFG.model_copy(update={"pools": [CFG.pools[0].model_copy(update={"node_count": 2})]})
    s = make_setup(INFO, False, two, None, None, None, market="on-demand")
    # the site is full for 10 h; three one-node jobs queue behind it and a three-node one fits no pool
    jobs = [TraceJob(1, 0.0, 36_000.0, 36_000.0, 16)] + [TraceJob(i, 10.0, 3600.0, 3600.0, 8) for i in (2, 3, 4)]
    jobs.append(TraceJob(5, 10.0, 3600.0, 3600.0, 24))
    h = Hindsight(s, [j for j in jobs if j.job_id != 5])
    assert set(h.pool) == {1, 2, 3, 4}
    assert 5 not in Hindsight(make_setup(TraceInfo("swf", max_procs=32, max_nodes=4), False, two, None, None, None,
                                         market="on-demand"), jobs).pool
    got = h.replay(frozenset({2, 3, 4}))
    assert sorted(got.waits) == [1]  # all three burst, but not at once
    # two start at the first cycle (120 s); the third waits for a node: it bursts at the first cycle after one
    # of them ends (120 + 120 boot + 3600 = 3,840 s, so the cycle at 3,840 s)
    jct = {2: 120 - 10 + 120 + 3600, 3: 120 - 10 + 120 + 3600, 4: 3840 - 10 + 120 + 3600}
    assert got.mean_jct_s == pytest.approx((36_000 + sum(jct.values())) / 4)


def test_on_a_config_with_budgets_the_report_says_the_plan_is_no_bound(tmp_path):
    import json

    from typer.testing import CliRunner

    from burstd.cli.app import app
    from tests.unit.simulate.test_simulate_cli import SWF, calm_spot_traces

    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    args = ["simulate", "--trace", str(trace), "--policy", "never,burstd", "--hindsight", "--json",
            "--spot-traces", str(calm_spot_traces(tmp_path / "s"))]
    built_in = json.loads(CliRunner().invoke(app, args).output)
    assert "caveat" not in built_in["hindsight"]
    conf = tmp_path / "burstd.toml"
    conf.write_text('[[pools]]\nname = "aws"\nprovider = "local"\npartition = "cloud"\nnode_prefix = "c"\n'
                    'node_count = 10\nmarket = "spot"\nprice_per_hour = 0.1\nondemand_price_per_hour = 0.3\n'
                    '[[pools.instance_types]]\nname = "c5.2xlarge"\ncpus = 8\nmemory_mb = 16384\n'
                    '[budget]\nsite_usd = 100\n')
    r = CliRunner().invoke(app, args + ["--config", str(conf)])
    assert r.exit_code == 0, r.output
    assert "not a bound" in json.loads(r.output)["hindsight"]["caveat"]
