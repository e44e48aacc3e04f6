"""Server-side preemption: the ``burstd-preempt`` drain reason the agent leaves on a node drives the lease once
the provider confirms it; the agent's own (node-bound) report drives it alone. A reason by itself is a hint: root
on any cloud node holds the munge key and can write another node's reason (issue 21 item 6).

Plan level (pure functions) first, then whole cycles with the fakes: drain once, terminate and requeue once
the deadline passed, nothing for other reasons, nothing repeated, nothing lost across a restart.
"""

from __future__ import annotations

import pytest

from burstd.daemon.actions import Drain, Fail, Intent, Terminate
import dataclasses

from burstd.daemon.planning import (
    World, notice_reason, plan_intents, plan_leases, plan_node_notices, provider_confirms_notice,
    recorded_deadline, unconfirmed_notices,
)
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.preemption import Notice, preemption_reason
from burstd.domain.slurm import Job, Node, Snapshot
from burstd.providers.base import Instance
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.test_daemon_reconcile import CFG
from tests.unit.daemon.test_durable_intents import ready_lease

S = LeaseState
NOW = 1_000_000.0
DEADLINE = NOW + 120


def _reason(deadline=DEADLINE, kind="interruption", action="terminate"):
    return preemption_reason(Notice(kind=kind, action=action, deadline=deadline, source="aws"))


def _lease(state, node="cloud1", lid="L1", launched=NOW - 600, reason=""):
    return Lease(lid, "local", node, state, created_at=NOW - 700, state_since=NOW - 50, instance_id="i-1",
                 launched_at=launched, job_ids=(5,), reason=reason)


def _confirmed(lease):
    return True


def _node(reason, name="cloud1"):
    return Node(name, "MIXED", ("CLOUD", "DRAIN"), reason=reason)


def _world(lease, node, now=NOW, jobs=()):
    snap = Snapshot(taken_at=now, nodes=(node,), jobs=tuple(jobs))
    return World(now, now, snap, {"local": (Instance("i-1", lease.lease_id, lease.node_name, "local", "running",
                                                     lease.launched_at or 0.0),)}, (lease,))


# --- plan level --------------------------------------------------------------------------------------
def test_a_confirmed_preempt_reason_on_a_ready_lease_becomes_the_agent_notice_and_drains_it():
    lease = _lease(S.READY)
    snap = Snapshot(taken_at=NOW, nodes=(_node(_reason()),))
    intents = plan_node_notices([lease], snap, _confirmed)
    expected = notice_reason("spot-interruption", DEADLINE, f"Slurm reason {_reason()}")
    assert intents == [Intent("notice", "cloud1", expected, NOW)]
    assert expected.startswith(f"spot-interruption deadline {DEADLINE:.0f}")
    # the same plan_intents path an agent POST /v1/notices takes
    assert plan_intents(intents, [lease], snap) == [Drain("L1", expected)]
    # before the deadline the decision table leaves the lease alone
    drained = _lease(S.DRAINING, reason=expected)
    assert recorded_deadline(drained) == DEADLINE
    assert plan_leases(_world(drained, _node(_reason())), CFG) == []


def test_a_forged_reason_alone_drains_nothing_and_its_deadline_terminates_nothing():
    # root on another cloud node (munge key: a Slurm admin) wrote this node's reason; nothing confirms it
    lease = _lease(S.READY)
    snap = Snapshot(taken_at=NOW, nodes=(_node(_reason()),))
    assert plan_node_notices([lease], snap) == []
    assert plan_node_notices([lease], snap, provider_confirms_notice(_world(lease, _node("")).listings)) == []
    assert unconfirmed_notices([lease], snap, lambda _: False) == ["cloud1"]
    # long past the forged deadline: the READY lease and its VM stay
    assert plan_leases(_world(lease, _node(_reason()), now=DEADLINE + 3600), CFG) == []
    # an admin's drain (DRAINING, no recorded notice) plus a forged reason: still nothing
    admin = _lease(S.DRAINING, reason="drained by admin")
    assert recorded_deadline(admin) is None
    assert plan_leases(_world(admin, _node(_reason()), now=DEADLINE + 3600), CFG) == []


@pytest.mark.parametrize("change, confirms", [
    ({}, False),  # running, nothing said
    ({"preempted": True}, True),  # the provider reports the reclaim
    ({"state": "stopping"}, True),
    ({"state": "shutting-down"}, True),
    ({"state": "running", "lease_id": "other", "instance_id": "i-9"}, False),  # another lease's VM going
])
def test_the_provider_listing_confirms_a_hint_only_for_the_leases_own_vm(change, confirms):
    lease = _lease(S.READY)
    inst = dataclasses.replace(Instance("i-1", "L1", "cloud1", "local", "running", NOW - 600), **change)
    snap = Snapshot(taken_at=NOW, nodes=(_node(_reason()),))
    got = plan_node_notices([lease], snap, provider_confirms_notice({"local": (inst,)}))
    assert len(got) == (1 if confirms else 0)


def test_deadline_passed_fails_requeues_what_runs_there_and_terminates_the_vm():
    job = Job(9, "j", "u", "a", ("cloud",), "RUNNING", nodes="cloud[1-2]")
    lease = _lease(S.DRAINING, reason=notice_reason("spot-interruption", DEADLINE, "agent"))
    actions = plan_leases(_world(lease, _node(_reason()), now=DEADLINE + 1, jobs=[job]), CFG)
    assert [type(a) for a in actions] == [Fail, Terminate]
    fail, term = actions
    assert fail.requeue == (5, 9) and fail.power_down and "deadline" in fail.reason
    assert term.instance_ids == ("i-1",)


@pytest.mark.parametrize("reason", [
    "maintenance",  # an admin's drain
    "",
    "burstd-preempt: terminate at not-a-time (aws)",
    "burstd-preempt terminate at 2025-11-22T00:00:00Z",
    _reason(kind="rebalance"),  # a recommendation, not a reclaim: no deadline to enforce
    _reason(deadline=NOW - 650),  # older than this lease's VM: left over from the node's previous one
])
def test_other_reasons_leave_the_lease_untouched(reason):
    for state in (S.READY, S.DRAINING):
        lease = _lease(state)
        snap = Snapshot(taken_at=NOW, nodes=(_node(reason),))
        assert plan_node_notices([lease], snap, _confirmed) == []
        assert plan_leases(_world(lease, _node(reason), now=DEADLINE + 3600), CFG) == []


def test_only_ready_leases_get_a_notice_and_no_snapshot_means_nothing():
    snap = Snapshot(taken_at=NOW, nodes=(_node(_reason()),))
    for state in (S.DRAINING, S.BOOTING, S.TERMINATING, S.FAILED):
        assert plan_node_notices([_lease(state)], snap, _confirmed) == []
    assert plan_node_notices([_lease(S.READY)], None, _confirmed) == []


# --- whole cycles -------------------------------------------------------------------------------------
def _env():
    clock = FakeClock(NOW)
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    return clock, store, adapter, provider, rec


def _agent_drains(adapter, node, deadline):
    adapter.nodes[node] = Node(node, "MIXED", ("CLOUD", "DRAIN"), reason=_reason(deadline))


def _provider_reclaims(provider, lease_id):
    """The provider's listing says the VM is being reclaimed: what confirms the reason's hint."""
    for iid, inst in provider.instances.items():
        if inst.lease_id == lease_id:
            provider.instances[iid] = dataclasses.replace(inst, preempted=True)


def test_cycles_drain_once_then_terminate_and_requeue_once_after_the_deadline():
    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    adapter.jobs = [Job(4, "train", "u", "a", ("cloud",), "RUNNING", nodes="cloud1")]
    deadline = clock() + 120
    _agent_drains(adapter, "cloud1", deadline)
    _provider_reclaims(provider, lease.lease_id)
    clock.advance(2)
    rec.cycle()
    got = store.lease(lease.lease_id)
    assert got.state == S.DRAINING
    assert got.reason == notice_reason("spot-interruption", deadline, f"Slurm reason {_reason(deadline)}")
    assert not [c for c in adapter.calls if c[0] == "drain"]  # the agent's reason stays in Slurm
    n_events = len(store.events(lease.lease_id))

    for _ in range(3):  # before the deadline: nothing more
        clock.advance(10)
        rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING and len(store.events(lease.lease_id)) == n_events

    clock.advance(120)
    rec.cycle()
    assert store.lease(lease.lease_id).state in (S.TERMINATING, S.TERMINATED)
    assert provider.live() == []
    for _ in range(3):
        clock.advance(5)
        rec.cycle()
    assert store.lease(lease.lease_id).state == S.TERMINATED
    assert adapter.calls.count(("requeue", 4)) == 1
    assert any(e.to_state == "FAILED" and "notice deadline" in e.reason for e in store.events())


def test_a_restarted_daemon_still_enforces_the_deadline():
    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    adapter.jobs = [Job(4, "train", "u", "a", ("cloud",), "RUNNING", nodes="cloud1")]
    deadline = clock() + 60
    _agent_drains(adapter, "cloud1", deadline)
    # the agent's own report
    rec.intake.add_intent("notice", ["cloud1"], notice_reason("spot-interruption", deadline, "agent"))
    clock.advance(2)
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING

    # the daemon dies; the deadline passes while it is down; a new one starts on the same store and Slurm
    clock.advance(300)
    rec2 = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    rec2.cycle()
    rec2.cycle()
    assert store.lease(lease.lease_id).state == S.TERMINATED
    assert adapter.calls.count(("requeue", 4)) == 1 and provider.live() == []


def test_a_reason_forged_on_another_node_changes_nothing_over_cycles_and_is_reported_once(caplog):
    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    adapter.jobs = [Job(4, "train", "u", "a", ("cloud",), "RUNNING", nodes="cloud1")]
    _agent_drains(adapter, "cloud1", clock() + 30)  # written by root on some other node
    with caplog.at_level("WARNING"):
        for _ in range(4):
            clock.advance(60)
            rec.cycle()
    assert store.lease(lease.lease_id).state == S.READY and provider.live() != []
    assert ("requeue", 4) not in adapter.calls
    assert sum("preemption reason not acted on" in r.getMessage() for r in caplog.records) == 1


def test_an_admin_drain_reason_changes_nothing_over_cycles():
    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    adapter.nodes["cloud1"] = Node("cloud1", "IDLE", ("CLOUD", "DRAIN"), reason="maintenance")
    for _ in range(3):
        clock.advance(3600)
        rec.cycle()
    assert store.lease(lease.lease_id).state == S.READY and provider.live() != []
    assert not [c for c in adapter.calls if c[0] in ("drain", "requeue")]


def _errors_counted(rec) -> float:
    return sum(s.value for m in rec.metrics.registry.collect() if m.name == "burstd_errors" for s in m.samples
               if s.name == "burstd_errors_total")


def test_a_notice_both_posted_by_the_agent_and_left_in_slurm_drains_once_without_error():
    # the agent reports the notice (POST /v1/notices) and drains the node with it in the reason: the cycle
    # sees the same notice twice; the second drain is a no-op, not "lease cannot move DRAINING -> DRAINING"
    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    deadline = clock() + 120
    rec.intake.add_intent("notice", ["cloud1"], notice_reason("spot-interruption", deadline, "agent"))
    _agent_drains(adapter, "cloud1", deadline)
    clock.advance(2)
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING
    assert rec.last_report is not None and rec.last_report.errors == []
    assert _errors_counted(rec) == 0
    assert [e.to_state for e in store.events(lease.lease_id)].count("DRAINING") == 1
    # planned once too: the two intents for one lease make one Drain
    twice = [Intent("notice", "cloud1", "agent", NOW), Intent("drain", "cloud1", "admin", NOW)]
    assert plan_intents(twice, [_lease(S.READY)], None) == [Drain("L1", "agent")]


def test_a_drain_of_a_lease_already_draining_is_a_no_op():
    from burstd.daemon.executor import Executor
    from burstd.daemon.metrics import Metrics
    from burstd.daemon.executor import CycleContext, CycleReport

    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    rec.intake.add_intent("drain", ["cloud1"], "maintenance")
    clock.advance(2)
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING
    n_events, n_calls = len(store.events(lease.lease_id)), len(adapter.calls)
    # a Drain planned from a stale view (READY when read, DRAINING by the time it runs) changes nothing
    metrics, report = Metrics(), CycleReport(started_at=clock())
    Executor(store, adapter, {"local": provider}, CFG, metrics, clock=clock).apply(
        [Drain(lease.lease_id, "notice again")], CycleContext(report))
    assert store.lease(lease.lease_id).state == S.DRAINING and report.errors == []
    assert len(store.events(lease.lease_id)) == n_events and len(adapter.calls) == n_calls
    assert not [m for m in metrics.registry.collect() if m.name == "burstd_errors" and
                any(s.value for s in m.samples)]


# --- the replacement boots during the notice ------------------------------------------------------------
def _cloud(name, *flags, state="IDLE", reason=""):
    return Node(name, state, ("CLOUD", *flags), partitions=("cloud",), reason=reason)


def test_a_notice_on_a_node_with_jobs_boots_one_spare_node_of_its_partition_in_another_offering():
    from burstd.daemon.actions import BootReplacement
    from burstd.providers.base import Offering

    reclaimed = Offering("m5.large", "us-east-1a", "spot")
    job = Job(9, "j", "u", "a", ("cloud",), "RUNNING", nodes="cloud1")
    nodes = (_cloud("cloud1", "DRAIN", state="MIXED", reason=_reason()),
             _cloud("cloud2"),  # up and idle already: Slurm can use it as it is, no boot needed
             _cloud("cloud3", "POWERED_DOWN", "DRAIN", reason="maintenance"),  # an admin's
             Node("other1", "IDLE", ("CLOUD", "POWERED_DOWN"), partitions=("gpu",)),  # not where the job runs
             _cloud("cloud4", "POWERED_DOWN"),  # has a lease still booting
             _cloud("cloud5", "POWERED_DOWN"),
             _cloud("cloud6", "POWERED_DOWN"))
    snap = Snapshot(taken_at=NOW, nodes=nodes, jobs=(job,))
    booting = Lease("L4", "local", "cloud4", S.BOOTING, created_at=NOW - 5, state_since=NOW - 5)
    listing = {"local": (Instance("i-1", "L1", "cloud1", "local", "running", NOW - 600, offering=reclaimed),)}
    acts = plan_intents([Intent("notice", "cloud1", "spot")], [_lease(S.READY), booting], snap, listing)
    assert acts == [Drain("L1", "spot", (9,)), BootReplacement("L1", "cloud5", reclaimed)]
    # two notices in one pass take two different spares; an admin's drain and a node running nothing take none
    two = _lease(S.READY, node="cloud2", lid="L2")
    snap2 = Snapshot(taken_at=NOW, nodes=nodes, jobs=(job, Job(10, "k", "u", "a", ("cloud",), "RUNNING",
                                                                nodes="cloud2")))
    acts = plan_intents([Intent("notice", "cloud1", "spot"), Intent("notice", "cloud2", "spot")],
                        [_lease(S.READY), two, booting], snap2)
    assert [(a.lease_id, a.node) for a in acts if isinstance(a, BootReplacement)] == [("L1", "cloud5"),
                                                                                      ("L2", "cloud6")]
    assert not [a for a in plan_intents([Intent("drain", "cloud1", "admin")], [_lease(S.READY)], snap)
                if isinstance(a, BootReplacement)]
    idle = Snapshot(taken_at=NOW, nodes=nodes)
    assert plan_intents([Intent("notice", "cloud1", "spot")], [_lease(S.READY)], idle) == [Drain("L1", "spot")]


def test_the_cycle_powers_up_the_spare_once_and_cools_the_reclaimed_offering_only_if_the_pool_has_another():
    from burstd.daemon.actions import BootReplacement
    from burstd.daemon.executor import CycleContext, Executor
    from burstd.daemon.metrics import Metrics
    from burstd.daemon.pools import PoolHealth
    from burstd.providers.base import Offering

    clock, store, adapter, provider, rec = _env()
    lease = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    adapter.nodes["cloud1"] = _cloud("cloud1", "DRAIN", state="MIXED", reason=_reason(clock() + 120))
    adapter.nodes["cloud2"] = _cloud("cloud2", "POWERED_DOWN")
    adapter.jobs = [Job(4, "train", "u", "a", ("cloud",), "RUNNING", nodes="cloud1")]
    _provider_reclaims(provider, lease.lease_id)  # the reason is a hint until the provider confirms it
    for _ in range(3):  # the notice is read again every cycle: one power-up
        clock.advance(2)
        rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING
    assert [c for c in adapter.calls if c[0] == "power_up"] == [("power_up", ("cloud2",))]

    a, b = Offering("m5.large", "us-east-1a", "spot"), Offering("m5.large", "us-east-1b", "spot")
    for offered, cooled in (([a, b], True), ([a], False)):
        health = PoolHealth(FakeStore(clock), CFG, clock)  # a fresh record of cooldowns each time
        provider.offerings = lambda market, offered=offered: [o for o in offered if o.market == market]
        ex = Executor(store, adapter, {"local": provider}, CFG, Metrics(), clock=clock, health=health)
        ex.apply([BootReplacement(lease.lease_id, "cloud3", a)], CycleContext())
        assert health.cooldown.is_cooling(a) is cooled and not health.cooldown.is_cooling(b)
