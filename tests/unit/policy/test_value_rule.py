"""Issue 10's policy: the value of waiting (burst when the wait saved is worth the expected bill) and Uniform
Progress escalation (a preempted job leaves spot only once it falls behind its line). Real decide(), small
clusters from policy_factories."""

from __future__ import annotations

import pytest
from policy_factories import NOW, book, busy_cluster, config, onprem_nodes, pending, pool, running

from burstd.domain.slurm import Snapshot
from burstd.policy import decide
from burstd.policy.decide import _wait_units
from burstd.policy.offers import PoolView
from burstd.policy.progress import behind_s, off_spot, worth_micros


# the figures below are for 5 node-hours a job-hour and a slack of 2, whatever the defaults
V5 = {"waiting": {"wait_value_per_hour": 5}, "progress_slack": 2.0}


def run(snapshot, cfg=None, progress=None):
    return decide(snapshot, [], book(), None, cfg or config(policy=V5), progress=progress)


def test_a_short_job_facing_a_long_wait_goes_to_spot_and_says_what_it_weighed():
    d = run(busy_cluster(pending(1)))  # 1 node, 1 h limit; on-prem frees up in 10 h
    assert [(e.job_id, e.market) for e in d.eligible] == [(1, "spot")]
    r = d.explanations[1].reason
    # spot $1/node-h x (1 h + 5 min boot); 10 h - 5 min of wait x 5 node-hours x $3 on-demand
    assert "expected bill $1.08, the wait it saves is worth $148.75" in r and r.endswith("$1.00/node-h: burst")


def test_a_big_long_job_whose_wait_is_worth_less_than_its_bill_waits_and_says_why():
    big = pending(1, cpus=32, node_count=4, limit_min=1200, waited_s=2 * 3600)  # 80 node-hours on spot: $80.33
    d = run(busy_cluster(big, end_in_s=2 * 3600))
    assert d.eligible == []
    r = d.explanations[1].reason
    assert "stays on-prem: its expected bill on spot in pool aws-cpu is $80.33" in r
    assert "worth only $28.75" in r and "wait_value_per_hour 5" in r
    # the same job bursts once its expected wait is long enough to be worth the bill
    assert [e.market for e in run(busy_cluster(big, end_in_s=8 * 3600)).eligible] == ["spot"]
    # with the rule off the compute-wait steps decide again: it has waited out 80 node-h x 60 s, so it bursts
    off = config(policy={"waiting": {"wait_value_per_hour": 0}})
    assert run(busy_cluster(big, end_in_s=2 * 3600), off).eligible != []


def test_a_job_the_value_rule_keeps_home_bursts_once_it_has_waited_twice_its_limit():
    # the big job above: its 2 h of expected wait is worth $28.75 against an $80.33 bill; its limit is 20 h
    def big(waited_h):
        return busy_cluster(pending(1, cpus=32, node_count=4, limit_min=1200, waited_s=waited_h * 3600),
                            end_in_s=2 * 3600)

    assert run(big(39)).eligible == []
    d = run(big(41))
    assert [e.market for e in d.eligible] == ["spot"]
    r = d.explanations[1].reason
    assert "worth $28.75" in r and "waited over 2 x its time limit (waiting.max_wait_to_limit_ratio)" in r
    # 0 turns the bound off
    unbounded = config(policy={**V5, "waiting": {"wait_value_per_hour": 5, "max_wait_to_limit_ratio": 0}})
    assert run(big(41), unbounded).eligible == []
    # and it never sends a job whose on-prem start is nearer than a boot
    near = config(policy={**V5, "waiting": {"wait_value_per_hour": 5, "min_expected_wait_s": 0}})
    late_but_near = busy_cluster(pending(1, cpus=32, node_count=4, limit_min=1200, waited_s=41 * 3600),
                                 end_in_s=200)
    assert run(late_but_near, near).eligible == []


def test_an_on_demand_only_site_waits_longer_than_a_spot_site():
    job = pending(1, limit_min=8 * 60)
    spot_site = config(policy=V5)  # spot $1, on-demand $3
    od_site = config(pools=[pool(price=3.0, ondemand=None, market="on-demand")], policy=V5)
    for end_in_s, spot_goes, od_goes in ((1800, False, False), (3600, True, False), (3 * 3600, True, True)):
        snap = busy_cluster(job, end_in_s=end_in_s)
        assert bool(run(snap, spot_site).eligible) is spot_goes, end_in_s
        assert bool(run(snap, od_site).eligible) is od_goes, end_in_s


def test_a_preempted_job_stays_on_spot_while_on_its_uniform_progress_line_and_leaves_once_behind():
    # submitted 1 h ago, 1 h limit, slack 2: the line asks for 30 min of work by now
    job = pending(1, restart_count=1)
    ahead = run(busy_cluster(job), progress={1: 1800.0})
    assert [e.market for e in ahead.eligible] == ["spot"]
    just_behind = run(busy_cluster(job), progress={1: 1800.0 - 500})  # behind by less than boot + restart (600 s)
    assert [e.market for e in just_behind.eligible] == ["spot"]
    behind = run(busy_cluster(job), progress={1: 600.0})
    assert [e.market for e in behind.eligible] == ["on-demand"]
    r = behind.explanations[1].reason
    assert "preempted 1 times and 20 min of work behind its Uniform Progress line" in r
    assert r.endswith("on-demand: burst")
    # no progress known: assumed none (the job may not checkpoint)
    assert [e.market for e in run(busy_cluster(job)).eligible] == ["on-demand"]
    # never preempted: nothing lost to spot yet, however long it waited
    assert [e.market for e in run(busy_cluster(pending(1, waited_s=10 * 3600))).eligible] == ["spot"]


def test_behind_and_home_when_on_demand_is_not_worth_it():
    # behind its line, so on-demand only at $3: a 10-node-hour job whose 2 h wait is worth less goes home
    job = pending(1, cpus=16, node_count=2, limit_min=300, restart_count=1)
    d = run(busy_cluster(job, end_in_s=2 * 3600))
    assert d.eligible == [] and "its expected bill on on-demand" in d.explanations[1].reason


def test_the_preemption_caps_still_apply():
    job = pending(1, restart_count=1)
    capped = config(policy={**V5, "max_preemptions_spot": 1})
    assert [e.market for e in run(busy_cluster(job), capped, progress={1: 3600.0}).eligible] == ["on-demand"]
    d = run(busy_cluster(pending(1, restart_count=4)), progress={1: 3600.0})
    assert d.eligible == [] and "max_preemptions_total 4" in d.explanations[1].reason


@pytest.mark.parametrize("now, done, want", [(NOW, 0.0, 1800.0), (NOW, 3000.0, -1200.0), (NOW + 86400, 0.0, 3600.0)])
def test_behind_is_measured_against_the_uniform_line_capped_at_the_limit(now, done, want):
    assert behind_s(now, NOW - 3600, 3600.0, done, 2.0) == pytest.approx(want)


def test_pure_helpers_edge_cases():
    assert behind_s(NOW, NOW - 3600, 3600.0, 0.0, 0.0) == 0.0  # slack 0: the rule is off
    assert not off_spot(NOW, NOW - 3600, 3600.0, 0.0, 2.0, 300.0, restarts=0)
    assert off_spot(NOW, NOW - 3600, 3600.0, 0.0, 2.0, 300.0, restarts=1)
    assert worth_micros(5.0, 3_000_000, -10.0) == 0.0
    assert worth_micros(5.0, 3_000_000, 3600.0) == 15_000_000


def test_an_hour_of_wait_is_worth_the_same_to_a_big_job_as_to_a_small_one():
    # two pools of one kind: 8-CPU nodes at $3 on-demand and 64-CPU nodes at $24; on-prem frees up in 30 min.
    # Mean JCT counts each job once, so both jobs' 25 min of saved wait is worth 5 x $3 x 25/60 = $6.25:
    # the small job's bill is under that and it bursts; the big one's is not and it waits for on-prem
    small = pool("aws-s", partition="cs", prefix="s", cpus=8, price=1.0, ondemand=3.0)
    big = pool("aws-b", partition="cb", prefix="b", cpus=64, price=8.0, ondemand=24.0)
    run_on_prem = tuple(running(10_000 + i, cpus=64, end_in_s=1800) for i in range(4))
    jobs = (pending(1, cpus=64), pending(2, cpus=8))
    d = run(Snapshot(taken_at=NOW, jobs=run_on_prem + jobs, nodes=onprem_nodes(4, cpus=64)),
            config(pools=[small, big], policy=V5))
    assert [(e.job_id, e.pool) for e in d.eligible] == [(2, "aws-s")]
    r = d.explanations[1].reason
    assert "its expected bill on spot in pool aws-b" in r and "worth only $6.25" in r
    # priced at its own node, the big job's wait would have been worth 8 x as much ($50), more than its bill
    assert "$50.00" not in r


def test_cpu_and_gpu_jobs_keep_their_own_unit_of_wait():
    cfg = config(pools=[pool("cpu", partition="pc", prefix="c", ondemand=0.09),
                        pool("gpu1", partition="p1", prefix="g", gpus=1, price=1.0, ondemand=3.06),
                        pool("gpu8", partition="p8", prefix="h", gpus=8, price=8.0, ondemand=24.48),
                        pool("spot-only", partition="ps", prefix="s", gpus=1, price=0.5, ondemand=None)])
    views = {p.name: PoolView(p, p.node_count) for p in cfg.pools}
    od = {"cpu": 90_000, "gpu1": 3_060_000, "gpu8": 24_480_000}  # a pool with no on-demand offer prices nothing
    assert _wait_units(views, od) == (90_000, 3_060_000)
    assert _wait_units(views, {"gpu8": 24_480_000}) == (0, 24_480_000)  # 0: the job's own pool's price is used
