"""Issue 25: a spot launch that found no capacity reaches decide() as the job's failed spot launches, so the
escalation counts it like a preemption (``burstd.daemon.failed_launches``, ``burstd.policy.progress.setbacks``)."""

from __future__ import annotations

import pytest

from burstd.daemon.failed_launches import FailedSpotLaunches
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import Lease, LeaseState
from burstd.providers.base import ErrorKind
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG


@pytest.fixture
def env():
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    seen: list[dict[int, int]] = []

    def decider(*args, progress=None, data=None, failed_spot_launches=None):
        seen.append(dict(failed_spot_launches or {}))
        return first_rule(*args, progress=progress, data=data)

    rec = Reconciler(CFG, store, adapter, {"local": provider}, decider, clock=clock)
    return clock, store, adapter, provider, rec, seen


def launch_fails(env, kind: ErrorKind, job_id: int, node: str, market: str = "spot") -> None:
    clock, store, adapter, provider, rec, _ = env
    provider.fail_next = kind
    adapter.jobs = [j for j in adapter.jobs if j.job_id != job_id]
    adapter.add_job(job_id, "CONFIGURING", node)  # Slurm holds the job on the node it powers up
    store.create_lease(pool="local", node_name=node, job_ids=(job_id,), market=market)
    rec.cycle()
    clock.advance(60)


def test_a_capacity_failure_of_a_spot_launch_reaches_decide_as_the_jobs_failed_spot_launch(env):
    clock, store, seen = env[0], env[1], env[5]
    launch_fails(env, ErrorKind.CAPACITY, 6, "cloud2")
    assert any(lease.state in (LeaseState.FAILED, LeaseState.TERMINATED) for lease in store.leases())
    assert seen[-1] == {6: 1}  # the same cycle's decide() is told
    clock.advance(CFG.cloud.capacity_cooldown_s)  # the pool takes launches again
    launch_fails(env, ErrorKind.CAPACITY, 6, "cloud3")
    assert seen[-1] == {6: 2}  # and counts each failure


@pytest.mark.parametrize("kind, market", [(ErrorKind.QUOTA, "spot"), (ErrorKind.CONFIG, "spot"),
                                          (ErrorKind.CAPACITY, "on-demand")])
def test_other_failures_and_on_demand_launches_do_not_count(env, kind, market):
    launch_fails(env, kind, 7, "cloud2", market)
    assert env[5][-1] == {}


def test_a_job_that_left_slurm_is_forgotten(env):
    adapter, rec, seen = env[2], env[4], env[5]
    launch_fails(env, ErrorKind.CAPACITY, 6, "cloud2")
    assert seen[-1] == {6: 1}
    adapter.jobs = [j for j in adapter.jobs if j.job_id != 6]
    rec.cycle()
    rec.cycle()
    assert seen[-1] == {}


def test_a_gang_counts_one_failed_launch_for_its_job():
    book = FailedSpotLaunches()
    gang = [Lease(f"g{i}", "local", f"cloud{i}", LeaseState.LAUNCHING, job_ids=(9,), gang="g0") for i in range(3)]
    book.record(gang)
    book.record([Lease("x", "local", "cloud9", LeaseState.LAUNCHING, market="on-demand", job_ids=(10,))])
    assert book.counts() == {9: 1}
    book.prune([10])
    assert book.counts() == {}


def test_a_restarted_daemon_counts_the_failures_its_store_recorded(env):
    """A restart (or a standby taking over) rebuilds the counts from the FAILED leases: the escalation does not
    start over for a job whose spot launches already found no capacity."""
    clock, store, adapter, provider = env[:4]
    launch_fails(env, ErrorKind.CAPACITY, 6, "cloud2")
    launch_fails(env, ErrorKind.QUOTA, 7, "cloud3")  # not capacity: never counted
    seen: list[dict[int, int]] = []

    def decider(*args, progress=None, data=None, failed_spot_launches=None):
        seen.append(dict(failed_spot_launches or {}))
        return first_rule(*args, progress=progress, data=data)

    restarted = Reconciler(CFG, store, adapter, {"local": provider}, decider, clock=clock)
    restarted.cycle()
    assert seen[-1] == {6: 1}


def test_seeding_counts_each_launch_call_once_a_job_and_only_spot_capacity_failures():
    reason = "launch failed (capacity): every offering is out of capacity"
    leases = [Lease(f"g{i}", "local", f"cloud{i}", LeaseState.FAILED, job_ids=(9,), gang="g0", reason=reason)
              for i in range(3)]  # one gang call
    leases.append(Lease("a", "local", "cloud5", LeaseState.FAILED, job_ids=(9,), reason=reason))  # a second call
    leases.append(Lease("b", "local", "cloud6", LeaseState.FAILED, job_ids=(10,), market="on-demand", reason=reason))
    leases.append(Lease("c", "local", "cloud7", LeaseState.FAILED, job_ids=(11,), reason="boot timeout"))
    leases.append(Lease("d", "local", "cloud8", LeaseState.TERMINATED, job_ids=(12,), reason=reason))  # closed
    book = FailedSpotLaunches()
    book.seed(leases)
    assert book.seeded and book.counts() == {9: 2, 12: 1}
    book.unseed()
    assert not book.seeded
