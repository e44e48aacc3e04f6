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
