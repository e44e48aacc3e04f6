"""Which jobs come back when a lease fails, on every failure path: ``plan_leases`` names the candidates and
when the trouble began (``Fail.requeue``, ``Fail.since``), ``jobs_to_requeue`` keeps the live ones.

The world: job 5 asked for the node and was cancelled before (Slurm says CANCELLED), job 9 runs there now,
job 11 runs on another node. Every path brings back 9 and never 5 or 11, and the failure records what it
requeued; a notice records the jobs running when it arrived.
"""

from __future__ import annotations

import pytest

from burstd.daemon.actions import Close, Drain, Fail, Intent, Terminate
from burstd.daemon.planning import World, jobs_to_requeue, notice_reason, plan_intents, plan_leases
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.preemption import Notice, preemption_reason
from burstd.domain.slurm import Job, Node, Snapshot
from burstd.providers.base import ErrorKind, Instance
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState
NOW = 1_000_000.0
RUNNING = Job(9, "b", "u", "a", ("cloud",), "RUNNING", nodes="cloud1")
ELSEWHERE = Job(11, "c", "u", "a", ("cloud",), "RUNNING", nodes="cloud2")


def _lease(state, *, since=NOW - 10_000, gang=None, node="cloud1", lid="L1", reason=""):
    return Lease(lid, "local", node, state, created_at=NOW - 20_000, state_since=since, instance_id="i-1",
                 launched_at=NOW - 19_000, job_ids=(5,), gang=gang, reason=reason)


def _world(leases, node_state=("IDLE", ("CLOUD", "POWERING_UP")), reason="", listed=True, jobs=(RUNNING, ELSEWHERE)):
    nodes = tuple(Node(x.node_name, node_state[0], node_state[1], reason=reason) for x in leases)
    snap = Snapshot(taken_at=NOW, nodes=nodes, jobs=tuple(jobs))
    insts = tuple(Instance("i-1", x.lease_id, x.node_name, "local", "running", NOW - 19_000) for x in leases)
    return World(NOW, NOW, snap, {"local": insts if listed else ()}, tuple(leases))


def _notice(deadline):
    return preemption_reason(Notice(kind="interruption", action="terminate", deadline=deadline, source="local"))


def _fails(actions):
    return [a for a in actions if isinstance(a, Fail)]


@pytest.mark.parametrize("case", ["launch timeout", "boot timeout", "vanished while booting", "vanished when ready",
                                  "reclaim with notice", "reclaim without notice", "draining vanished"])
def test_every_failure_path_requeues_the_running_job_never_the_ended_one(case):
    if case == "launch timeout":
        world = _world([_lease(S.LAUNCHING)], listed=False)
        world = World(world.now, world.observed_at, world.snapshot, {"local": ()}, world.leases)
        # a listed but absent LAUNCHING instance is retried until the timeout: make it time out
    elif case == "boot timeout":
        world = _world([_lease(S.BOOTING)])
    elif case == "vanished while booting":
        world = _world([_lease(S.BOOTING)], listed=False)
    elif case == "vanished when ready":
        world = _world([_lease(S.READY)], ("MIXED", ("CLOUD",)), listed=False)
    elif case == "reclaim with notice":
        # the deadline is the one the lease's (authenticated) notice recorded, not the node's reason
        drained = _lease(S.DRAINING, reason=notice_reason("spot-interruption", NOW - 1, "agent"))
        world = _world([drained], ("MIXED", ("CLOUD", "DRAIN")), reason=_notice(NOW - 1))
    elif case == "reclaim without notice":
        world = _world([_lease(S.READY)], ("MIXED", ("CLOUD", "NOT_RESPONDING")), listed=False)
    else:
        world = _world([_lease(S.DRAINING)], ("MIXED", ("CLOUD", "DRAIN")), reason=_notice(NOW + 60), listed=False)
    fails = _fails(plan_leases(world, CFG))
    assert len(fails) == 1, case
    fail = fails[0]
    assert 11 not in fail.requeue and fail.since is not None and fail.since <= NOW, case
    states = {5: "CANCELLED", 9: "RUNNING", 11: "RUNNING"}
    assert jobs_to_requeue(fail.requeue, states, [], fail.since) == (9,), case


def test_a_gang_member_failing_requeues_the_gang_job_once_per_node_it_runs_on():
    gang_job = Job(7, "g", "u", "a", ("cloud",), "RUNNING", nodes="cloud[1-2]", node_count=2)
    leases = [_lease(S.READY, gang="L1"), _lease(S.READY, gang="L1", node="cloud2", lid="L2")]
    world = _world(leases, ("MIXED", ("CLOUD",)), listed=False, jobs=(gang_job,))
    fails = _fails(plan_leases(world, CFG))
    assert {f.lease_id for f in fails} == {"L1", "L2"}
    # requeueing twice is harmless: the second is a no-op
    assert all(jobs_to_requeue(f.requeue, {7: "RUNNING", 5: "COMPLETED"}, [], f.since) == (7,) for f in fails)


def test_a_cancelled_job_that_started_the_vm_is_never_requeued_and_nothing_runs_there():
    world = _world([_lease(S.READY)], ("IDLE", ("CLOUD",)), listed=False, jobs=())
    fail = _fails(plan_leases(world, CFG))[0]
    assert jobs_to_requeue(fail.requeue, {5: "CANCELLED"}, [], fail.since) == ()


def test_a_notice_records_the_jobs_running_when_it_arrived():
    lease = _lease(S.READY)
    snap = Snapshot(taken_at=NOW, nodes=(Node("cloud1", "MIXED", ("CLOUD",)),), jobs=(RUNNING, ELSEWHERE))
    assert plan_intents([Intent("notice", "cloud1", "spot", NOW)], [lease], snap) == [Drain("L1", "spot", (9,))]


def test_the_failure_and_the_notice_are_on_the_lease_record_with_their_jobs():
    clock = FakeClock(NOW)
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    rec.intake.request_resume(["cloud1"], {"cloud1": (5,)})
    rec.cycle()
    adapter.set_node("cloud1", "MIXED")
    clock.advance(5)
    rec.cycle()
    assert store.leases()[0].state == S.READY
    adapter.jobs = [RUNNING]  # job 5 was cancelled; job 9 runs on cloud1
    adapter.ended = {5: "CANCELLED"}
    rec.intake.add_intent("notice", ["cloud1"], "spot-interruption")
    clock.advance(5)
    rec.cycle()
    provider.instances.clear()  # reclaimed
    clock.advance(5)
    rec.cycle()
    events = store.events()
    drained = next(e for e in events if e.to_state == S.DRAINING)
    failed = next(e for e in events if e.to_state == S.FAILED)
    assert drained.extra == {"running_jobs": [9]} and failed.extra == {"requeue": [9]}
    assert ("requeue", 9) in adapter.calls and ("requeue", 5) not in adapter.calls


def test_a_launch_failure_does_not_requeue_a_job_cancelled_before_it():
    clock = FakeClock(NOW)
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    rec.cycle()  # a snapshot newer than the lease below: the daemon has seen the queue
    clock.advance(1)
    rec.intake.request_resume(["cloud1"], {"cloud1": (5,)})
    provider.fail_next = ErrorKind.CAPACITY
    clock.advance(5)
    rec.last_snapshot = Snapshot(taken_at=clock(), jobs=())  # job 5 is gone: cancelled while waiting
    adapter.ended = {5: "CANCELLED"}
    rec.cycle()
    assert ("requeue", 5) not in adapter.calls


def test_a_reclaim_the_provider_reports_is_recorded_as_a_preemption_not_a_vanished_instance():
    lease = _lease(S.READY)
    snap = Snapshot(taken_at=NOW, nodes=(Node("cloud1", "MIXED", ("CLOUD",)),), jobs=(RUNNING,))
    reclaimed = Instance("i-1", "L1", "cloud1", "local", "preempted", NOW - 19_000, preempted=True)
    fail = _fails(plan_leases(World(NOW, NOW, snap, {"local": (reclaimed,)}, (lease,)), CFG))[0]
    assert fail.reason.startswith("preempted") and "vanished" not in fail.reason and 9 in fail.requeue
    gone = _fails(plan_leases(World(NOW, NOW, snap, {"local": ()}, (lease,)), CFG))[0]
    assert "vanished" in gone.reason  # deleted outside burstd, with no word from the provider


def test_slurm_suspending_a_failed_lease_leaves_it_to_plan_leases_which_keeps_why_it_failed():
    """SuspendProgram for the node of a FAILED lease (Slurm powers the node down after the failed resume) asks
    nothing of its own: ``plan_leases`` closes the lease with its failure as the final reason when no instance
    is listed, and terminates the instance when one is. Before, the suspend moved it FAILED -> TERMINATING and
    the close wrote "instance gone" over the reason (seen live on the GCP capacity test)."""
    failed = Lease("L1", "local", "cloud1", S.FAILED, created_at=NOW - 60, state_since=NOW - 5,
                   reason="launch failed (capacity): no capacity", job_ids=(5,))
    snap = Snapshot(taken_at=NOW, nodes=(Node("cloud1", "IDLE", ("CLOUD", "POWERING_DOWN")),), jobs=())
    assert plan_intents([Intent("suspend", "cloud1", "", NOW)], [failed], snap) == []
    world = World(NOW, NOW, snap, {"local": ()}, (failed,))
    assert [a for a in plan_leases(world, CFG) if isinstance(a, Close)] == [Close("L1", failed.reason)]
    live = Lease("L2", "local", "cloud1", S.READY, created_at=NOW - 60, state_since=NOW - 30, job_ids=(5,))
    assert [type(a) for a in plan_intents([Intent("suspend", "cloud1", "", NOW)], [live], snap)] == [Terminate]
