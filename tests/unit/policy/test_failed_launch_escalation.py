"""Issue 25: a spot launch that found no capacity counts toward the escalation like a preemption, in decide()
and in the Can't-Be-Late replay alike (``burstd.policy.progress.setbacks``). Real decide(), small clusters from
policy_factories."""

from __future__ import annotations

from policy_factories import book, busy_cluster, config, pending

from burstd.policy import decide
from burstd.policy.progress import off_spot, setbacks
from burstd.simulate.cant_be_late import ON_DEMAND, SPOT, Setting, State, burstd

V5 = {"waiting": {"wait_value_per_hour": 5}, "progress_slack": 2.0}


def run(snapshot, failed=None, progress=None, cfg=None):
    return decide(snapshot, [], book(), None, cfg or config(policy=V5), progress=progress,
                  failed_spot_launches=failed)


def test_setbacks_are_preemptions_plus_failed_spot_launches_and_either_one_can_escalate():
    assert setbacks(0, 0) == 0 and setbacks(2, 3) == 5
    # 1 h since submission, 1 h limit, slack 2: the line asks for 30 min; none done, boot 5 min
    behind = {"now": 3600.0, "submit": 0.0, "limit_s": 3600.0, "done_s": 0.0, "slack": 2.0, "boot_s": 300.0}
    assert not off_spot(**behind, restarts=setbacks(0, 0))  # spot cost it nothing: no escalation
    assert off_spot(**behind, restarts=setbacks(0, 1))
    assert off_spot(**behind, restarts=setbacks(1, 0))


def test_a_never_preempted_job_whose_spot_launch_found_no_capacity_goes_on_demand_once_behind_its_line():
    job = pending(1)  # submitted 1 h ago, 1 h limit: 30 min of work behind a line of slack 2
    assert [e.market for e in run(busy_cluster(job)).eligible] == ["spot"]  # nothing lost to spot yet
    d = run(busy_cluster(job), failed={1: 1})
    assert [e.market for e in d.eligible] == ["on-demand"]
    r = d.explanations[1].reason
    assert "1 spot launch for it found no capacity and 30 min of work behind its Uniform Progress line" in r
    # another job's failed launches are not this one's
    assert [e.market for e in run(busy_cluster(job), failed={2: 3}).eligible] == ["spot"]


def test_a_failed_launch_on_its_line_still_tries_spot_again():
    job = pending(1, waited_s=900)  # 15 min since submission: the line asks 7.5 min, within boot + restart
    assert [e.market for e in run(busy_cluster(job), failed={1: 2}).eligible] == ["spot"]


def test_preemptions_and_failed_launches_are_both_named():
    d = run(busy_cluster(pending(1, restart_count=1)), failed={1: 2})
    assert [e.market for e in d.eligible] == ["on-demand"]
    assert "preempted 1 times, 2 spot launches for it found no capacity, and 30 min" in d.explanations[1].reason


def test_failed_launches_do_not_count_toward_the_safety_cap_or_the_spot_cap():
    # max_preemptions_total sends a job home after that many preemptions; a launch that never ran is no preemption
    capped = config(policy={**V5, "max_preemptions_total": 1, "max_preemptions_spot": 1})
    d = run(busy_cluster(pending(1, waited_s=900)), failed={1: 5}, cfg=capped)
    assert [e.market for e in d.eligible] == ["spot"]


def test_the_replay_applies_the_rule_decide_applies():
    # the Can't-Be-Late burstd strategy and decide() agree, job by job, on when failed launches escalate
    st = Setting(work_s=3600.0, deadline_s=7200.0, overhead_s=300.0)  # slack 2, the boot 5 min as above
    for waited_s, failed in ((900, 0), (900, 2), (3600, 0), (3600, 1)):
        s = State(t=waited_s, done_s=0.0, running="none", spot_available=False, preemptions=0,
                  believed_done_s=0.0, failed_launches=failed, gap_s=600.0)
        market = run(busy_cluster(pending(1, waited_s=waited_s)), failed={1: failed}).eligible[0].market
        assert (burstd(s, st) == ON_DEMAND) == (market == "on-demand"), (waited_s, failed)
        assert burstd(s, st) in (SPOT, ON_DEMAND)
