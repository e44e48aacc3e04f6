"""The market the policy decides for a job reaches its node's lease and the launch (issue 10, the daemon part).

The real policy (``burstd.policy.decide``) drives these: ``policy.max_preemptions_spot`` is its own knob for
escalating a spot pool's job to on-demand after that many preemptions.
"""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.daemon.actions import AddPartition, SetJobMarket
from burstd.daemon.markets import JobMarkets, pool_price_micros
from burstd.daemon.planning import UNLEASED_GRACE_S, plan_decisions
from burstd.daemon.reconcile import Reconciler
from burstd.domain.decisions import Decisions, MakeEligible
from burstd.domain.slurm import Job, Node
from burstd.policy.decide import decide
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore


def config(max_preemptions_spot: int = 2):
    return parse_config({
        "pools": [{"name": "aws", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
                   "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.1,
                   "ondemand_price_per_hour": 0.3}],
        "policy": {"onprem_partitions": ["onprem"], "max_preemptions_spot": max_preemptions_spot,
                   "waiting": {"kind": "constant", "min_wait_s": 3, "min_expected_wait_s": 0}},
        "budget": {"default_account_usd": 100},
    })


def env(cfg, store=None):
    clock = FakeClock()
    store = store or FakeStore(clock)
    adapter = FakeAdapter()
    adapter.nodes = {"onprem1": Node("onprem1", "ALLOCATED", partitions=("onprem",), cpus=2)}
    adapter.set_node("cloud1", "IDLE", "POWERED_DOWN")
    provider = FakeProvider("aws", clock)
    rec = Reconciler(cfg, store, adapter, {"aws": provider}, decide, clock=clock)
    return clock, store, adapter, provider, rec


def pending(clock, job_id=7, restart_count=0, partitions=("onprem",)):
    return Job(job_id, "j", "alice", "chem", partitions, "PENDING", reason="Resources", priority=100,
               submit_time=int(clock() - 600), time_limit_min=10, cpus=2, restart_count=restart_count)


def running(clock, job_id=1):
    return Job(job_id, "r", "bob", "chem", ("onprem",), "RUNNING", start_time=int(clock() - 60),
               end_time=int(clock() + 36000), time_limit_min=600, nodes="onprem1", cpus=2)


def test_plan_records_a_market_other_than_the_pools_before_the_partition_is_added():
    cfg = config()
    escalated = Decisions(eligible=[MakeEligible(7, "aws", "cloud", "on-demand")],
                          markets={7: ("aws", "on-demand"), 8: ("aws", "spot")})
    actions = plan_decisions(escalated, cfg, markets={8: "on-demand"})
    assert actions == [SetJobMarket(7, "on-demand"), SetJobMarket(8, None), AddPartition(7, "cloud")]
    # already recorded as decided: nothing to write
    assert plan_decisions(escalated, cfg, markets={7: "on-demand"}) == [AddPartition(7, "cloud")]
    # the pool's own market is not recorded (a decider that fills only ``eligible`` is read the same way)
    assert plan_decisions(Decisions(eligible=[MakeEligible(9, "aws", "cloud", "spot")]), cfg) == [
        AddPartition(9, "cloud")]


def test_an_escalated_job_gets_an_on_demand_lease_and_launch_at_the_on_demand_price():
    clock, store, adapter, provider, rec = env(config(max_preemptions_spot=1))
    adapter.jobs = [running(clock), pending(clock, restart_count=1)]  # preempted once: on-demand only
    rec.cycle()
    assert ("add_partition", 7, "cloud") in adapter.calls
    assert rec.last_decisions.eligible[0].market == "on-demand"
    assert store.job_markets() == {7: "on-demand"}

    # Slurm schedules job 7 on cloud1 and calls ResumeProgram
    rec.intake.request_resume(["cloud1"], {"cloud1": (7,)})
    [lease] = store.leases()
    assert lease.market == "on-demand" and lease.price_per_hour_micros == 300_000
    rec.cycle()
    assert [(r.lease_id, r.market) for r in provider.requests] == [(lease.lease_id, "on-demand")]


def test_a_job_escalated_while_it_keeps_its_cloud_partition_is_recorded_too():
    """A preempted job is requeued with its cloud partition still on: no MakeEligible says its market changed,
    but the decision's ``markets`` does, and the next lease for it is on-demand."""
    clock, store, adapter, _, rec = env(config(max_preemptions_spot=1))
    adapter.jobs = [running(clock), pending(clock)]
    rec.cycle()
    assert store.job_markets() == {}  # spot: the pool's own market
    adapter.jobs = [running(clock), pending(clock, restart_count=1, partitions=("onprem", "cloud"))]
    adapter.calls.clear()
    rec.cycle()
    assert not [c for c in adapter.calls if c[0] == "add_partition"]
    assert store.job_markets() == {7: "on-demand"}
    rec.intake.request_resume(["cloud1"], {"cloud1": (7,)})
    assert store.leases()[0].market == "on-demand"


def test_a_spot_job_gets_a_spot_lease():
    clock, store, adapter, provider, rec = env(config())
    adapter.jobs = [running(clock), pending(clock)]
    rec.cycle()
    rec.intake.request_resume(["cloud1"], {"cloud1": (7,)})
    [lease] = store.leases()
    assert lease.market == "spot" and lease.price_per_hour_micros == 100_000
    rec.cycle()
    assert [r.market for r in provider.requests] == ["spot"]


def test_the_decided_market_survives_a_restart_and_reaches_drift_repair():
    """Recorded durably: a new daemon on the same store creates the lease Slurm powers up without one
    (``CreateLease``) in the decided market. Once the job has left Slurm its entry is dropped."""
    cfg = config(max_preemptions_spot=0)
    clock, store, adapter, _, rec = env(cfg)
    adapter.jobs = [running(clock), pending(clock)]
    rec.cycle()
    assert store.job_markets() == {7: "on-demand"}

    clock2, _, adapter2, provider2, rec2 = env(cfg, store=store)  # restarted daemon, same database
    adapter2.jobs = [running(clock), Job(7, "j", "alice", "chem", ("cloud",), "RUNNING", nodes="cloud1", cpus=2,
                                         time_limit_min=10, start_time=int(clock()))]
    adapter2.set_node("cloud1", "MIXED", "POWERING_UP")  # the resume call was lost
    rec2.cycle()
    assert store.leases() == []  # not yet: the resume call may still be on its way
    clock2.advance(UNLEASED_GRACE_S)
    rec2.cycle()
    [lease] = store.leases()
    assert lease.node_name == "cloud1" and lease.market == "on-demand" and lease.job_ids == (7,)
    assert [r.market for r in provider2.requests] == ["on-demand"]

    adapter2.jobs = [running(clock)]  # job 7 finished and left Slurm
    rec2.cycle()
    assert store.job_markets() == {}


def test_lease_terms_on_demand_wins_for_a_node_shared_by_jobs_of_both_markets():
    cfg = config()
    store = FakeStore(FakeClock())
    markets = JobMarkets(store)
    markets.set(7, "on-demand")
    pool = cfg.pool("aws")
    assert markets.lease_terms(pool, (6, 7)) == ("on-demand", 300_000)
    assert markets.lease_terms(pool, (6,)) == ("spot", 100_000)
    assert pool_price_micros(pool, "spot") == 100_000
    with pytest.raises(ValueError, match="market"):
        markets.set(8, "preemptible")
    assert JobMarkets(store).recorded() == {7: "on-demand"}  # a restarted daemon reads it back
    markets.set(7, None)
    assert store.job_markets() == {} and markets.lease_terms(pool, (7,)) == ("spot", 100_000)
