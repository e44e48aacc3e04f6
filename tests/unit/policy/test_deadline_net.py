"""Issue 25: a job that declares a deadline (``sbatch --deadline``) gets Uniform Progress's safety net in
decide(): off spot once the time left is at most its work left plus a boot and one cycle, whatever its
setbacks; and its Uniform Progress line ends at the deadline instead of submit + progress_slack x limit.
Real decide(), small clusters from policy_factories (a 1 h job, boot 5 min, cycle 15 s: the net is 3,915 s)."""

from __future__ import annotations

from policy_factories import NOW, book, busy_cluster, config, pending, pool

from burstd.policy import decide
from burstd.policy.progress import deadline_net, line_slack, off_spot, out_of_reach

V5 = {"waiting": {"wait_value_per_hour": 5}, "progress_slack": 2.0}
NET_S = 3600 + 300 + 15  # work left (the 1 h limit, none done) + boot + one cycle


def run(snapshot, failed=None, progress=None, cfg=None):
    return decide(snapshot, [], book(), None, cfg or config(policy=V5), progress=progress,
                  failed_spot_launches=failed)


def markets(d) -> list[str]:
    return [e.market for e in d.eligible]


def test_the_net_is_the_work_left_a_boot_and_a_cycle():
    assert deadline_net(0.0, 3915.0, 3600.0, 0.0, 300.0, 15.0)
    assert not deadline_net(0.0, 3916.0, 3600.0, 0.0, 300.0, 15.0)
    assert not deadline_net(0.0, 3915.0, 3600.0, 1.0, 300.0, 15.0)  # a second of work done: a second to spare
    assert not deadline_net(0.0, None, 3600.0, 0.0, 300.0, 15.0)
    assert out_of_reach(0.0, 3899.0, 3600.0, 0.0, 300.0) and not out_of_reach(0.0, 3900.0, 3600.0, 0.0, 300.0)
    # the net escalates with no setback at all; the line alone would not
    assert off_spot(0.0, 0.0, 3600.0, 0.0, 2.0, 300.0, 0, deadline=3915.0, cycle_s=15.0)
    assert not off_spot(0.0, 0.0, 3600.0, 0.0, 2.0, 300.0, 0, deadline=3916.0, cycle_s=15.0)


def test_a_job_just_inside_its_net_goes_on_demand_and_one_just_outside_stays_on_spot():
    inside = run(busy_cluster(pending(1, deadline=int(NOW + NET_S))))
    assert markets(inside) == ["on-demand"]
    assert "inside its safety net" in inside.explanations[1].reason
    outside = run(busy_cluster(pending(1, deadline=int(NOW + NET_S + 1))))
    assert markets(outside) == ["spot"]
    assert "its safety net (not spot from then on) starts in 1 s" in outside.explanations[1].reason


def test_without_a_deadline_nothing_changes():
    job = pending(1)
    d = run(busy_cluster(job))
    assert markets(d) == ["spot"] and "deadline" not in d.explanations[1].reason
    # a far deadline changes neither the market nor the wait of a job spot has not set back
    far = run(busy_cluster(pending(1, deadline=int(NOW + 30 * 86400))))
    assert markets(far) == markets(d)


def test_the_work_left_is_the_limit_less_the_progress_decide_is_told():
    job = pending(1, deadline=int(NOW + 2000))  # 1 h of work would not fit: inside the net
    assert markets(run(busy_cluster(job))) == ["on-demand"]
    # 35 min kept: 25 min + boot + cycle left = 1,815 s < 2,000 s: outside, spot again
    assert markets(run(busy_cluster(job), progress={1: 2100.0})) == ["spot"]
    assert markets(run(busy_cluster(job), progress={2: 2100.0})) == ["on-demand"]  # another job's progress


def test_the_deadline_replaces_the_progress_slack_lines_end():
    # one failed spot launch, 1 h since submission, 1 h of work, none done. With progress_slack 2 the line
    # asks 30 min (behind by more than two boots: on-demand); a deadline 10 h after submission asks 6 min
    assert markets(run(busy_cluster(pending(1)), failed={1: 1})) == ["on-demand"]
    far = pending(1, deadline=int(NOW - 3600 + 36000))
    assert markets(run(busy_cluster(far), failed={1: 1})) == ["spot"]
    assert line_slack(0.0, 3600.0, 2.0, 36000.0) == 10.0 and line_slack(0.0, 3600.0, 2.0, None) == 2.0
    # a 10 h job with 25 min kept, 1 h after submission: progress_slack 2 asks 30 min (5 behind: spot again);
    # a deadline 15 h after submission (outside the net) asks 40 min (15 behind: on-demand)
    long_job = {"limit_min": 600, "waited_s": 3600}
    kept = {1: 1500.0}
    assert markets(run(busy_cluster(pending(1, **long_job)), failed={1: 1}, progress=kept)) == ["spot"]
    tight = pending(1, **long_job, deadline=int(NOW - 3600 + 15 * 3600))
    assert markets(run(busy_cluster(tight), failed={1: 1}, progress=kept)) == ["on-demand"]
    assert "15 min of work behind its Uniform Progress line" in \
        run(busy_cluster(tight), failed={1: 1}, progress=kept).explanations[1].reason


def test_a_job_that_cannot_make_its_deadline_still_goes_on_demand_and_says_so():
    d = run(busy_cluster(pending(1, deadline=int(NOW + 1800))))
    assert markets(d) == ["on-demand"]  # never spot: on-demand is its best chance
    r = d.explanations[1].reason
    assert "not even on-demand makes it now, so not spot: on-demand is its best chance" in r
    assert "30 min" in r and "60 min of work left" in r


def test_inside_the_net_a_wait_on_prem_that_misses_the_deadline_is_no_option():
    constant = config(policy={"waiting": {"kind": "constant", "min_wait_s": 7200}, "progress_slack": 2.0})
    job = pending(1, waited_s=60, deadline=int(NOW + NET_S))
    assert markets(run(busy_cluster(pending(1, waited_s=60)), cfg=constant)) == []  # the policy wants 2 h first
    assert markets(run(busy_cluster(job), cfg=constant)) == ["on-demand"]  # on-prem starts in 10 h: too late
    # an on-prem start that still makes the deadline keeps the waiting policy's say
    soon = run(busy_cluster(job, end_in_s=60), cfg=constant)
    assert markets(soon) == [] and "inside its safety net" in soon.explanations[1].reason


def test_no_on_demand_pool_names_the_net():
    spot_only = config(pools=[pool(ondemand=None)], policy=V5)
    d = run(busy_cluster(pending(1, deadline=int(NOW + NET_S))), cfg=spot_only)
    assert markets(d) == []
    assert "inside its deadline's safety net: on-demand only, and no pool offers on-demand" in \
        d.explanations[1].reason


def test_the_replay_applies_the_net_decide_applies():
    # the Can't-Be-Late "burstd, deadline declared" strategy and decide() agree state by state (the cycle as
    # the replay's tick): the net, the line to the deadline, and neither
    from burstd.simulate.cant_be_late import ON_DEMAND, Setting, State, burstd_deadline_declared

    st = Setting(work_s=3600.0, deadline_s=7200.0, overhead_s=300.0)
    cases = {(3000, 0.0, 0): "spot", (3300, 0.0, 0): "on-demand", (900, 0.0, 2): "spot",
             (3000, 0.0, 1): "on-demand", (3300, 2000.0, 1): "spot", (3300, 2000.0, 0): "spot"}
    for (waited_s, done_s, failed), want in cases.items():
        s = State(t=waited_s, done_s=done_s, running="none", spot_available=False, preemptions=0,
                  believed_done_s=done_s, failed_launches=failed, gap_s=15.0)
        job = pending(1, waited_s=waited_s, deadline=int(NOW - waited_s + st.deadline_s))
        d = run(busy_cluster(job), failed={1: failed}, progress={1: done_s})
        assert markets(d) == [want], (waited_s, done_s, failed)
        assert (burstd_deadline_declared(s, st) == ON_DEMAND) == (want == "on-demand"), (waited_s, done_s, failed)


def test_burstctl_explain_shows_the_deadline_and_the_net():
    from burstd.policy.explain import explain_job

    snap = busy_cluster(pending(1, deadline=int(NOW + NET_S)), pending(2, deadline=int(NOW + 86400)), pending(3))
    d = run(snap)
    inside, outside, none = (explain_job(j, snap, decisions=d).sentence for j in (1, 2, 3))
    assert "deadline 1970-01-12 14:51 UTC (sbatch --deadline) in 65 min, 60 min of work left: inside its safety " \
           "net (the work left, a boot and a cycle), so not spot" in inside and "on-demand: burst;" in inside
    assert "deadline 1970-01-13 13:46 UTC (sbatch --deadline) in 24 h" in outside
    assert "its safety net (not spot from then on) starts in 22.9 h" in outside
    assert "deadline" not in none
