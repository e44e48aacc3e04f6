"""The Can't-Be-Late setting: one job, a deadline, a spot market tick by tick (burstd.simulate.cant_be_late)."""

from __future__ import annotations

import pytest

from burstd.simulate.cant_be_late import (
    Setting,
    State,
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

pytest.importorskip("highspy")

GAP = 600.0
H = 3600.0
# a small job (8 h of work, deadline 12 h, 6 min changeover) keeps the integer programme tiny
SMALL = Setting(work_s=8 * H, deadline_s=12 * H, overhead_s=0.1 * H)
STRATEGIES = (burstd, burstd_reported_progress, burstd_deadline_declared, burstd_reported_progress_deadline_declared,
              burstd_preemptions_only, uniform_progress, ondemand_only)


def ticks(pattern: str, repeat: int = 1) -> list[bool]:
    return [c == "1" for c in pattern * repeat]


def test_spot_always_there_costs_the_spot_bill_for_work_and_one_changeover():
    avail = ticks("1", 200)
    want = (SMALL.work_s + SMALL.overhead_s) * SMALL.spot_per_hour / H
    for fn in (burstd, uniform_progress):
        out = replay(avail, GAP, SMALL, fn)
        assert out.met_deadline and out.preemptions == 0, fn.__name__
        assert out.cost_usd == pytest.approx(want)
    assert omniscient_cost(avail, GAP, SMALL) == pytest.approx(want, rel=1e-6)
    assert replay(avail, GAP, SMALL, ondemand_only).cost_usd == pytest.approx(SMALL.ondemand_only_usd)


def test_no_spot_ever_burstd_counts_the_failed_launches_and_goes_on_demand_in_time():
    avail = ticks("0", 200)
    up = replay(avail, GAP, SMALL, uniform_progress)
    assert up.met_deadline and up.spot_s == 0
    assert omniscient_cost(avail, GAP, SMALL) == pytest.approx(SMALL.ondemand_only_usd, rel=1e-6)
    # the rule before issue 25 escalated only a preempted job: one that never got spot waited past its deadline
    assert not replay(avail, GAP, SMALL, burstd_preemptions_only).met_deadline
    # the shipped rule counts each failed spot launch as a setback: it leaves spot once behind its line
    fixed = replay(avail, GAP, SMALL, burstd)
    assert fixed.met_deadline and fixed.spot_s == 0
    # it waited for spot only while on its line, give or take two changeovers (12 h for 8 h: 1.5 s a second)
    assert fixed.finish_s - SMALL.work_s - SMALL.overhead_s <= 1.5 * 2 * SMALL.overhead_s + 2 * GAP


@pytest.mark.parametrize("pattern", ["1110", "111000", "1111111100", "0001111111"])
def test_no_strategy_that_meets_the_deadline_pays_less_than_the_omniscient_schedule(pattern):
    avail = ticks(pattern, 100)
    best = omniscient_cost(avail, GAP, SMALL)
    assert best is not None
    for fn in STRATEGIES:
        out = replay(avail, GAP, SMALL, fn)
        if out.met_deadline:
            assert out.cost_usd >= best - 1e-6, fn.__name__
    assert best < SMALL.ondemand_only_usd  # spot was there to use


def test_preempted_behind_the_line_burstd_goes_on_demand_and_stays():
    # spot for 2 h, then gone for 2 h: a preemption, and behind the line (12 h for 8 h of work) by more than
    # two changeovers -> on-demand to the end
    avail = ticks("1" * 12 + "0" * 12 + "1" * 200)
    out = replay(avail, GAP, SMALL, burstd)
    assert out.preemptions == 1 and out.met_deadline
    assert out.spot_s == pytest.approx(2 * H)
    assert out.ondemand_s > 5 * H  # it did not go back to spot when spot returned


def test_a_deadline_no_schedule_can_meet_has_no_omniscient_cost():
    tight = Setting(work_s=8 * H, deadline_s=8 * H, overhead_s=0.1 * H)
    assert omniscient_cost(ticks("1", 100), GAP, tight) is None


def test_bad_setting_is_refused():
    with pytest.raises(ValueError, match="deadline_s"):
        Setting(work_s=10 * H, deadline_s=5 * H)


def test_reported_progress_keeps_burstd_on_spot_where_whole_hours_of_leases_would_send_it_on_demand():
    # 50-minute spot runs: the lease belief keeps no whole hour of any, so the job looks behind its line
    # and goes on-demand; told the real work (burstd.train), it stays on spot and pays less
    avail = ticks("11111" + "0", 100)
    lease = replay(avail, GAP, SMALL, burstd)
    told = replay(avail, GAP, SMALL, burstd_reported_progress)
    assert lease.met_deadline and told.met_deadline
    assert lease.ondemand_s > 0 and told.ondemand_s < lease.ondemand_s
    assert told.cost_usd < lease.cost_usd


def test_a_declared_deadline_takes_a_job_riding_its_line_off_spot_in_time():
    # reported progress rides the uniform line within its two-changeover tolerance; spot gone from 10 h to 12 h
    # leaves it behind by less than that near the end, so it waits for spot and misses by 24 min. Declared,
    # the deadline's safety net (work left + changeover + tick) sends it on-demand in time.
    avail = ticks("1" * 20 + "0" * 8 + "1" * 20 + "0" * 4 + "1" * 8 + "0" * 12 + "1" * 8)
    told = replay(avail, GAP, SMALL, burstd_reported_progress)
    declared = replay(avail, GAP, SMALL, burstd_reported_progress_deadline_declared)
    assert not told.met_deadline and told.finish_s == pytest.approx(12.4 * H)
    assert declared.met_deadline and declared.ondemand_s > 0 and declared.preemptions == told.preemptions
    best = omniscient_cost(avail, GAP, SMALL)
    assert best is not None and declared.cost_usd >= best - 1e-6


def test_the_safety_net_needs_no_setback_and_leaves_a_running_spot_job_alone():
    # 7.5 h of 8 kept, spot available, never set back (the line alone never escalates it). The net is 0.5 h of
    # work + a 0.1 h changeover + a 10-min tick = 0.77 h: 1 h before the deadline it is outside, 0.6 h inside
    at = lambda t, running="none": State(t=t * H, done_s=7.5 * H, running=running, spot_available=True,
                                          preemptions=0, believed_done_s=7.5 * H, failed_launches=0, gap_s=GAP)
    assert burstd_deadline_declared(at(11.0), SMALL) == "spot" == burstd(at(11.4), SMALL)
    assert burstd_deadline_declared(at(11.4), SMALL) == "on-demand"
    assert burstd_deadline_declared(at(11.4, running="spot"), SMALL) == "spot"  # a Slurm job does not migrate


def test_declaring_the_deadline_changes_nothing_while_the_net_is_far():
    avail = ticks("1" * 12 + "0" * 12 + "1" * 200)
    assert replay(avail, GAP, SMALL, burstd_deadline_declared) == replay(avail, GAP, SMALL, burstd)
