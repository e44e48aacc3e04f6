"""Only live jobs come back: when a lease fails, burstd requeues the jobs that were on the node when the notice or
the failure arrived, never one that had ended before, nor one its user cancelled (issue 15, item 1)."""

from __future__ import annotations

import pytest

from burstd.daemon.planning import jobs_to_requeue, notice_reason
from burstd.daemon.reconcile import Reconciler
from burstd.domain.budget import Allocation
from burstd.domain.lease import LeaseState
from burstd.domain.preemption import Notice, preemption_reason
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState
NOTICE_AT = 100.0


@pytest.mark.parametrize("state,alloc,requeued", [
    ("RUNNING", None, True),                                # still on the lost node
    ("CONFIGURING", None, True),                            # waiting for the node that never came
    ("PENDING", None, False),                               # already back in the queue
    ("CANCELLED", Allocation(1, 50.0, None), False),        # its user cancelled it: stays cancelled
    ("COMPLETED", Allocation(1, 50.0, 120.0), False),       # finished its work
    ("TIMEOUT", Allocation(1, 50.0, 120.0), False),
    ("FAILED", Allocation(1, 50.0, 130.0), True),           # killed by the reclaim (e.g. the notice's signal)
    ("NODE_FAIL", Allocation(1, 50.0, None), True),
    ("FAILED", Allocation(1, 50.0, 90.0), False),           # failed on its own before the notice
    ("FAILED", Allocation(1, 110.0, 130.0), False),         # started after the notice: not on the node then
    ("FAILED", None, False),                                # never on this lease's node
    (None, Allocation(1, 50.0, None), False),               # Slurm has forgotten it: nothing to bring back
])
def test_which_jobs_come_back(state, alloc, requeued):
    allocs = [alloc] if alloc else []
    assert jobs_to_requeue([1], {1: state}, allocs, NOTICE_AT) == ((1,) if requeued else ())


def ready(clock, store, adapter, provider, rec, node, job_ids):
    rec.intake.request_resume([node], {node: job_ids})
    rec.cycle()
    adapter.set_node(node, "ALLOCATED")
    clock.advance(5)
    rec.cycle()
    lease = store.lease_for_node(node)
    assert lease.state == S.READY
    return lease


@pytest.fixture
def env():
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    return clock, store, adapter, provider, rec


def test_a_cancelled_job_never_returns_when_its_node_is_reclaimed_later(env):
    """Job A started the VM and was cancelled; job B then ran there; the VM is reclaimed without notice: B comes
    back, A stays cancelled (it is in the lease's job list, but over)."""
    clock, store, adapter, provider, rec = env
    lease = ready(clock, store, adapter, provider, rec, "cloud1", (11,))
    adapter.ended[11] = "CANCELLED"  # scancel 11: squeue no longer lists it
    adapter.add_job(12, "RUNNING", "cloud1")
    store.record_allocations(lease.lease_id, [Allocation(11, clock() - 60, clock() - 30), Allocation(12, clock() - 20)])
    provider.instances.clear()  # reclaimed, no notice
    clock.advance(5)
    rec.cycle()
    requeued = [c[1] for c in adapter.calls if c[0] == "requeue"]
    assert requeued == [12]


def test_a_job_killed_by_the_notice_signal_comes_back_and_one_that_finished_does_not(env):
    """With a notice: job B (a plain sleep killed after the notice) ended FAILED before the lease failed; it was on
    the node when the notice arrived, so it is requeued. Job C completed before the notice: left alone."""
    clock, store, adapter, provider, rec = env
    lease = ready(clock, store, adapter, provider, rec, "cloud1", (21,))
    t0 = clock()
    store.record_allocations(lease.lease_id, [Allocation(21, t0 - 100, t0 - 50), Allocation(22, t0 - 40, None)])
    adapter.ended[21] = "COMPLETED"
    deadline = clock() + 30
    adapter.set_node("cloud1", "ALLOCATED", "DRAIN")
    adapter.nodes["cloud1"] = adapter.nodes["cloud1"].__class__(
        "cloud1", "ALLOCATED", flags=("CLOUD", "DRAIN"),
        reason=preemption_reason(Notice("interruption", "terminate", deadline, "aws")))
    # the agent's report
    rec.intake.add_intent("notice", ["cloud1"], notice_reason("spot-interruption", deadline, "agent"))
    clock.advance(1)
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING
    notice_at = store.lease(lease.lease_id).state_since
    adapter.ended[22] = "FAILED"  # the agent's signal (or the VM's end) killed it after the notice
    store.record_allocations(lease.lease_id, [Allocation(22, t0 - 40, notice_at + 5)])
    clock.advance(40)  # past the deadline
    rec.cycle()
    assert store.lease(lease.lease_id).state in (S.FAILED, S.TERMINATING, S.TERMINATED)
    assert [c[1] for c in adapter.calls if c[0] == "requeue"] == [22]


def test_a_gang_member_lost_requeues_its_job_once_even_if_every_member_fails(env):
    clock, store, adapter, provider, rec = env
    adapter.add_job(31, "CONFIGURING", "cloud[1-2]")
    rec.intake.request_resume(["cloud1", "cloud2"], {"cloud1": (31,), "cloud2": (31,)})
    rec.cycle()
    clock.advance(CFG.daemon.boot_timeout_s + 1)
    rec.cycle()
    assert {x.state for x in store.leases()} <= {S.FAILED, S.TERMINATING, S.TERMINATED}
    assert 31 in [c[1] for c in adapter.calls if c[0] == "requeue"]


def test_a_job_slurm_already_requeued_onto_another_node_is_not_requeued_again():
    """Slurm requeued the job itself when the VM died and it is booting on another cloud node by the time burstd
    fails the lease: requeueing it again would restart it a second time (Restarts=2)."""
    assert jobs_to_requeue([1, 2], {1: "CONFIGURING", 2: "RUNNING"}, [], NOTICE_AT, elsewhere=[1]) == (2,)


def test_the_executor_leaves_a_job_running_again_on_another_node_alone(env):
    clock, store, adapter, provider, rec = env
    ready(clock, store, adapter, provider, rec, "cloud1", (41,))
    adapter.add_job(41, "CONFIGURING", "cloud2")  # Slurm requeued it when cloud1 died; it waits for cloud2 now
    provider.instances.clear()
    clock.advance(5)
    rec.cycle()
    assert store.lease_for_node("cloud1") is None or store.lease_for_node("cloud1").state != S.READY
    assert [c for c in adapter.calls if c[0] == "requeue"] == []
