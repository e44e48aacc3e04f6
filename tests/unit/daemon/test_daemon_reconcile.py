"""The reconcile cycle with fake edges: the lease life, the invariants' repair paths, the decision table."""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.daemon.actions import (
    Adopt, ClearReason, Close, CreateLease, Fail, Launch, MarkReady, Refuse, Terminate, TerminateOrphan,
)
from burstd.daemon.intake import UnknownNode
from burstd.daemon.planning import UNLEASED_GRACE_S, World, plan_launches, plan_leases, plan_orphans
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.slurm import Job, Node, Snapshot
from burstd.providers.base import ErrorKind, Instance
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore

S = LeaseState
CFG = parse_config({
    "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
               "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}],
    "policy": {"onprem_partitions": ["onprem"], "waiting": {"min_wait_s": 60}},
    "budget": {"default_account_usd": 100},
    "daemon": {"launch_timeout_s": 100, "boot_timeout_s": 200, "orphan_grace_s": 30},
})


@pytest.fixture
def env():
    clock = FakeClock()
    store = FakeStore(clock)
    adapter = FakeAdapter()
    provider = FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    return clock, store, adapter, provider, rec


def states(store):
    return {x.node_name: x.state for x in store.leases()}


def test_resume_to_terminated_runs_one_vm_per_lease(env):
    clock, store, adapter, provider, rec = env
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    rec.intake.request_resume(["cloud1"], {"cloud1": (7,)})
    assert states(store) == {"cloud1": S.REQUESTED}
    rec.cycle()
    assert states(store) == {"cloud1": S.BOOTING}
    assert len(provider.live()) == 1 and provider.live()[0].lease_id == store.leases()[0].lease_id

    adapter.set_node("cloud1", "MIXED")  # slurmd registered
    clock.advance(5)
    rec.cycle()
    assert states(store) == {"cloud1": S.READY}
    # Slurm is told which instance backs the node (sacctmgr show instance), once, when it registers
    lease = store.leases()[0]
    assert [c for c in adapter.calls if c[0] == "set_instance"] == [
        ("set_instance", "cloud1", lease.instance_id, (lease.offering or "").split("/")[0] or "ns")]

    rec.intake.add_intent("suspend", ["cloud1"])
    rec.cycle()
    assert states(store) == {"cloud1": S.TERMINATING}
    assert provider.live() == []
    rec.cycle()
    assert states(store) == {"cloud1": S.TERMINATED}
    assert provider.launch_calls == [store.leases()[0].lease_id]


def test_repeated_resume_for_a_node_keeps_one_lease(env):
    _, store, _, provider, rec = env
    first = rec.intake.request_resume(["cloud1", "cloud2"])
    again = rec.intake.request_resume(["cloud1"])
    assert len(first["created"]) == 2 and again == {"created": [], "existing": [first["created"][0]], "deferred": []}
    rec.cycle()
    assert len(provider.live()) == 2


def test_resume_while_old_vm_terminates_is_deferred_then_recorded_from_slurm(env):
    clock, store, adapter, provider, rec = env
    rec.intake.request_resume(["cloud1"])
    rec.cycle()
    old = store.leases()[0]
    store.transition(old.lease_id, S.TERMINATING, reason="test: suspend in progress")
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")  # Slurm resumes the node again at once
    out = rec.intake.request_resume(["cloud1"], {"cloud1": (4,)})
    assert out["deferred"] == [old.lease_id] and out["created"] == []
    provider.instances.clear()  # the old VM is gone
    clock.advance(5)
    rec.cycle()
    rec.cycle()
    assert store.lease(old.lease_id).state == S.TERMINATED
    assert store.lease_for_node("cloud1") is None  # drift repair gives a resume call its time to arrive
    clock.advance(UNLEASED_GRACE_S)
    rec.cycle()
    rec.cycle()
    new = store.lease_for_node("cloud1")
    assert new is not None and new.lease_id != old.lease_id and new.state == S.BOOTING
    assert [i.lease_id for i in provider.live()] == [new.lease_id]


def test_unknown_node_is_refused_and_nothing_recorded(env):
    _, store, _, _, rec = env
    with pytest.raises(UnknownNode, match="onprem1"):
        rec.intake.request_resume(["cloud1", "onprem1"])
    assert store.leases() == []


def test_crash_after_provider_call_is_adopted_not_relaunched(env):
    clock, store, adapter, provider, rec = env
    lease = store.create_lease(pool="local", node_name="cloud1")
    store.transition(lease.lease_id, S.LAUNCHING)
    provider.launch(__import__("burstd.providers.base", fromlist=["LaunchRequest"]).LaunchRequest(
        lease.lease_id, "cloud1", "local"))  # the VM exists; the daemon died before recording it
    provider.launch_calls.clear()
    clock.advance(10)
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.BOOTING
    assert provider.launch_calls == [] and len(provider.live()) == 1


def test_crash_before_provider_call_relaunches_with_same_token(env):
    clock, store, adapter, provider, rec = env
    lease = store.create_lease(pool="local", node_name="cloud1")
    store.transition(lease.lease_id, S.LAUNCHING)
    clock.advance(10)
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    rec.cycle()
    assert provider.launch_calls == [lease.lease_id]
    assert store.lease(lease.lease_id).state == S.BOOTING


def test_transient_launch_error_retries_capacity_error_fails_and_requeues(env):
    clock, store, adapter, provider, rec = env
    provider.fail_next = ErrorKind.THROTTLED
    rec.intake.request_resume(["cloud1"], {"cloud1": (5,)})
    rec.cycle()
    assert states(store) == {"cloud1": S.LAUNCHING}
    clock.advance(10)
    rec.cycle()
    assert states(store) == {"cloud1": S.BOOTING}

    provider.fail_next = ErrorKind.CAPACITY
    adapter.add_job(6, "CONFIGURING", "cloud2")  # Slurm holds the job on the node it is powering up
    rec.intake.request_resume(["cloud2"], {"cloud2": (6,)})
    rec.cycle()
    lease2 = next(x for x in store.leases() if x.node_name == "cloud2")
    assert lease2.state in (S.FAILED, S.TERMINATED)
    assert ("power_down", ("cloud2",), True) in adapter.calls and ("requeue", 6) in adapter.calls


def test_boot_timeout_fails_powers_down_requeues_and_cleans_up(env):
    clock, store, adapter, provider, rec = env
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    adapter.add_job(9, "CONFIGURING", "cloud1")
    rec.intake.request_resume(["cloud1"], {"cloud1": (9,)})
    rec.cycle()
    clock.advance(CFG.daemon.boot_timeout_s + 1)
    rec.cycle()
    rec.cycle()
    assert states(store) == {"cloud1": S.TERMINATED}
    assert provider.live() == []
    assert ("power_down", ("cloud1",), True) in adapter.calls and ("requeue", 9) in adapter.calls
    assert adapter.expedited == []  # it never ran: Slurm's usual requeue delay
    assert any(e.to_state == "FAILED" and "did not register" in e.reason for e in store.events())


def test_vanished_instance_fails_lease_and_requeues_job(env):
    clock, store, adapter, provider, rec = env
    rec.intake.request_resume(["cloud1"], {"cloud1": (3,)})
    rec.cycle()
    adapter.set_node("cloud1", "ALLOCATED")
    adapter.add_job(3, "RUNNING", "cloud1")
    clock.advance(5)
    rec.cycle()
    assert states(store) == {"cloud1": S.READY}
    provider.instances.clear()  # spot reclaim seen server-side
    clock.advance(5)
    rec.cycle()
    rec.cycle()
    assert states(store) == {"cloud1": S.TERMINATED}
    assert ("requeue", 3) in adapter.calls
    assert adapter.expedited == [3]  # its run was lost with the VM: eligible again at once


def test_node_powered_down_in_slurm_terminates_ready_lease(env):
    clock, store, adapter, provider, rec = env
    rec.intake.request_resume(["cloud1"])
    rec.cycle()
    adapter.set_node("cloud1", "IDLE")
    clock.advance(5)
    rec.cycle()
    adapter.set_node("cloud1", "IDLE", "POWERED_DOWN")  # the suspend call was lost (daemon was down)
    clock.advance(5)
    rec.cycle()
    rec.cycle()
    assert states(store) == {"cloud1": S.TERMINATED} and provider.live() == []


def test_powering_up_node_without_lease_gets_one_once_its_resume_call_had_time_to_arrive(env):
    clock, store, adapter, provider, rec = env
    adapter.set_node("cloud3", "IDLE", "POWERING_UP")
    rec.cycle()
    clock.advance(UNLEASED_GRACE_S - 1)
    rec.cycle()
    assert store.leases() == []  # Slurm may not have called ResumeProgram yet: its call carries the gang
    clock.advance(1)
    rec.cycle()
    assert states(store) == {"cloud3": S.BOOTING}
    assert [i.node_name for i in provider.live()] == ["cloud3"]


def test_orphan_is_terminated_only_after_grace(env):
    clock, store, adapter, provider, rec = env
    provider.instances["i-x"] = Instance("i-x", "lease-gone", "cloud2", "local", "running", clock())
    rec.cycle()
    assert "i-x" in provider.instances
    clock.advance(CFG.daemon.orphan_grace_s + 1)
    rec.cycle()
    assert "i-x" not in provider.instances


def test_paused_refuses_launch_and_revokes_eligibility(env):
    clock, store, adapter, provider, rec = env
    store.set_pause(True, reason="test")
    adapter.jobs = [Job(1, "j", "u", "a", ("onprem", "cloud"), "PENDING", reason="Resources")]
    rec.intake.request_resume(["cloud1"])
    rec.cycle()
    assert states(store) == {"cloud1": S.REFUSED} and provider.launch_calls == []
    assert ("remove_partition", 1, "cloud") in adapter.calls


def test_budget_guard_refuses_launch_without_budget():
    clock = FakeClock()
    cfg = CFG.model_copy(update={"budget": CFG.budget.model_copy(update={"default_account_usd": None})})
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(cfg, store, adapter, {"local": provider}, first_rule, clock=clock)
    rec.intake.request_resume(["cloud1"])
    rec.cycle()
    lease = store.leases()[0]
    assert lease.state == S.REFUSED and "no budget" in lease.reason and provider.launch_calls == []


def test_first_rule_makes_long_waiting_job_eligible(env):
    clock, store, adapter, provider, rec = env
    now = clock()
    adapter.jobs = [
        Job(1, "old", "u", "a", ("onprem",), "PENDING", reason="Resources", submit_time=int(now - 120)),
        Job(2, "new", "u", "a", ("onprem",), "PENDING", reason="Resources", submit_time=int(now - 10)),
        Job(3, "optout", "u", "a", ("onprem",), "PENDING", reason="Resources", submit_time=int(now - 999),
            comment="burst:no"),
        Job(4, "held", "u", "a", ("onprem",), "PENDING", reason="JobHeldUser", submit_time=int(now - 999)),
        Job(5, "big", "u", "a", ("onprem",), "PENDING", reason="Priority", submit_time=int(now - 999), cpus=16),
    ]
    rec.cycle()
    adds = [c for c in adapter.calls if c[0] == "add_partition"]
    assert adds == [("add_partition", 1, "cloud")]
    ex = rec.last_decisions.explanations
    assert "burst:no" in ex[3].reason and "CPUs" in ex[5].reason and "waited" in ex[2].reason


# --- the decision table on its own -------------------------------------------------------------
NOW = 1000.0


def _lease(state, since=NOW - 50, node="cloud1", lid="L1", **kw):
    return Lease(lid, "local", node, state, created_at=0.0, state_since=since, **kw)


def _inst(lid="L1", node="cloud1", launched=0.0, state="running"):
    return Instance("i-1", lid, node, "local", state, launched)


@pytest.mark.parametrize("lease, node, instances, expected", [
    (_lease(S.LAUNCHING), None, [_inst()], Adopt),
    (_lease(S.LAUNCHING), None, [_inst(state="pending")], Launch),  # maybe half-made: launch again
    (_lease(S.LAUNCHING), None, [], Launch),
    (_lease(S.LAUNCHING, since=NOW - 1), None, [], None),  # just launched: the listing predates it
    (_lease(S.LAUNCHING, since=NOW - 500), None, [], Fail),  # past launch_timeout_s
    (_lease(S.BOOTING), Node("cloud1", "IDLE", ("CLOUD",)), [_inst()], MarkReady),
    (_lease(S.BOOTING), Node("cloud1", "IDLE", ("CLOUD", "POWERING_UP")), [_inst()], None),
    (_lease(S.BOOTING), None, [], Fail),
    (_lease(S.BOOTING, since=NOW - 300), Node("cloud1", "IDLE", ("CLOUD", "POWERING_UP")), [_inst()], Fail),
    (_lease(S.READY), Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN")), [_inst()], Terminate),
    (_lease(S.READY), Node("cloud1", "MIXED", ("CLOUD",)), [_inst(state="preempted")], Fail),
    (_lease(S.READY), Node("cloud1", "MIXED", ("CLOUD",)), [_inst()], None),
    (_lease(S.TERMINATING), None, [], Close),
    (_lease(S.TERMINATING), None, [_inst()], Terminate),
    (_lease(S.FAILED), None, [_inst()], Terminate),
    (_lease(S.FAILED), None, [], Close),
])
def test_plan_leases_table(lease, node, instances, expected):
    snap = Snapshot(taken_at=NOW, nodes=(node,) if node else ())
    world = World(NOW, NOW, snap, {"local": tuple(instances)}, (lease,))
    actions = plan_leases(world, CFG)
    kinds = [type(a) for a in actions]
    if expected is None:
        assert kinds == []
    else:
        assert kinds[0] is expected


def test_no_judgement_when_listing_failed():
    world = World(NOW, NOW, Snapshot(taken_at=NOW), {}, (_lease(S.READY), _lease(S.TERMINATING, lid="L2")))
    assert plan_leases(world, CFG) == []


def test_plan_launches_waits_for_previous_vm_of_same_node():
    old = _lease(S.TERMINATING, lid="old")
    new = _lease(S.REQUESTED, lid="new")
    assert plan_launches([old, new], paused=False) == []
    assert plan_launches([new], paused=False) == [Launch("new")]
    assert plan_launches([new], paused=True) == [Refuse("new", "bursting is paused")]


def test_plan_powering_up_node_without_lease():
    snap = Snapshot(taken_at=NOW, nodes=(Node("cloud2", "IDLE", ("CLOUD", "POWERING_UP")),
                                         Node("onprem9", "IDLE", ("CLOUD", "POWERING_UP"))))
    actions = plan_leases(World(NOW, NOW, snap, {"local": ()}, ()), CFG)
    assert actions == [CreateLease("cloud2", "local", "Slurm is powering the node up without a lease", ())]


def test_plan_orphans_spares_open_leases_and_young_instances():
    lease = _lease(S.READY, lid="L1")
    insts = (_inst("L1"), Instance("i-2", "L9", "cloud2", "local", "running", 0.0),
             Instance("i-3", "", "cloud3", "local", "running", NOW - 5))
    acts = plan_orphans(World(NOW, NOW, None, {"local": insts}, (lease,)), CFG)
    assert acts == [TerminateOrphan("local", "i-2", "L9", "lease L9 is not open; up 1000s (grace 30s)")]


def test_plan_orphans_spares_a_gang_vm_not_yet_labelled_while_its_gang_launches_but_not_after():
    # a crash between the gang's create call and its per-instance labels (aws.gang_tags.half_done) leaves a
    # VM with the gang's tag only; the gang's relaunch labels it, so killing it as an orphan would fail the job
    old = Instance("i-9", "", "", "local", "running", 0.0, extra={"gang": "G1"})
    for state in (S.REQUESTED, S.LAUNCHING):
        lease = _lease(state, lid="L1", gang="G1")
        assert plan_orphans(World(NOW, NOW, None, {"local": (old,)}, (lease,)), CFG) == []
    for leases in [(_lease(S.BOOTING, lid="L1", gang="G1"),), ()]:  # the gang launched without it, or is gone
        acts = plan_orphans(World(NOW, NOW, None, {"local": (old,)}, leases), CFG)
        assert acts == [TerminateOrphan("local", "i-9", "", "untagged instance; up 1000s (grace 30s)")]


def test_a_multi_node_resume_call_arriving_within_the_grace_is_one_gang_not_drift_repaired_node_by_node(env):
    # Slurm marks the nodes POWERING_UP a moment before its ResumeProgram call reaches the daemon; a cycle in
    # between used to record one lease per node without the gang, and the job's nodes launched one by one
    clock, store, adapter, provider, rec = env
    for node in ("cloud1", "cloud2"):
        adapter.set_node(node, "IDLE", "POWERING_UP")
    rec.cycle()
    clock.advance(UNLEASED_GRACE_S / 2)
    rec.intake.request_resume(["cloud1", "cloud2"], {"cloud1": (9,), "cloud2": (9,)})
    rec.cycle()
    leases = store.leases()
    assert len(leases) == 2 and {x.gang for x in leases} == {leases[0].gang} and leases[0].gang is not None


def test_cloud_node_left_down_by_a_failed_power_up_is_returned_once_its_vm_is_gone(env):
    clock, store, adapter, provider, rec = env
    rec.intake.request_resume(["cloud1"], {"cloud1": (5,)})
    rec.cycle()
    lease = store.leases()[0]
    # slurmd never registered: Slurm gives up at ResumeTimeout, marks the node DOWN and calls ResumeFailProgram
    down = Node("cloud1", "DOWN", flags=("CLOUD", "POWERED_DOWN", "NOT_RESPONDING"), reason="ResumeTimeout reached")
    adapter.nodes["cloud1"] = down
    adapter.nodes["cloud2"] = Node("cloud2", "DOWN", flags=("CLOUD", "POWERED_DOWN"), reason="admin: bad disk")
    rec.intake.add_intent("resume-fail", ["cloud1"])
    clock.advance(5)
    rec.cycle()
    assert ("resume", ("cloud1",)) not in adapter.calls  # not while the lease still owns a VM
    clock.advance(5)
    rec.cycle()
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.TERMINATED and provider.live() == []
    assert adapter.calls.count(("resume", ("cloud1",))) == 1  # back in the pool, powered down
    assert adapter.nodes["cloud1"].state == "IDLE" and adapter.nodes["cloud1"].is_powered_down
    assert ("resume", ("cloud2",)) not in adapter.calls  # an admin's DOWN is theirs


def test_reclaimed_node_back_to_idle_loses_burstd_reason_but_an_admins_reason_stays(env):
    clock, store, adapter, provider, rec = env
    rec.intake.request_resume(["cloud1"], {"cloud1": (3,)})
    rec.cycle()
    adapter.set_node("cloud1", "ALLOCATED")
    adapter.add_job(3, "RUNNING", "cloud1")
    adapter.nodes["cloud2"] = Node("cloud2", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="admin: keep off, bad NIC")
    clock.advance(5)
    rec.cycle()
    provider.instances.clear()  # the VM is gone
    clock.advance(5)
    rec.cycle()
    # burstd powered the node down with its own reason, which Slurm keeps on the idle~ node
    assert adapter.nodes["cloud1"].reason.startswith("burstd: ") and adapter.nodes["cloud1"].is_powered_down
    assert ("clear_reason", ("cloud1",)) not in adapter.calls  # not while the failed lease is open
    rec.cycle()
    rec.cycle()
    assert states(store) == {"cloud1": S.TERMINATED}
    assert adapter.calls.count(("clear_reason", ("cloud1",))) == 1 and adapter.nodes["cloud1"].reason == ""
    assert ("clear_reason", ("cloud2",)) not in adapter.calls
    assert adapter.nodes["cloud2"].reason == "admin: keep off, bad NIC"


@pytest.mark.parametrize("node, lease, cleared", [
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="burstd: preempted: the provider reclaimed the "
                                                               "instance"), None, True),
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="burstd refused: bursting is paused"), None, True),
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="burstd-preempt: terminate at 2026-11-22T00:31:07Z "
                                                               "(local)"), None, True),
    # an admin's reason, even one that mentions burstd
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="maintenance (burstd: later)"), None, False),
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="burstd:no-space"), None, False),
    # a lease still owns the node, or it is not settled yet, or out of service (the reason says why)
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN"), reason="burstd: x"), _lease(S.FAILED), False),
    (Node("cloud1", "IDLE", ("CLOUD", "POWERING_DOWN"), reason="burstd: x"), None, False),
    (Node("cloud1", "IDLE", ("CLOUD", "POWERED_DOWN", "DRAIN"), reason="burstd: x"), None, False),
    (Node("cloud1", "DOWN", ("CLOUD", "POWERED_DOWN"), reason="burstd: x"), None, False),
    (Node("cloud1", "IDLE", ("CLOUD",), reason="burstd: x"), None, False),  # up: not back in the pool yet
    (Node("onprem1", "IDLE", ("POWERED_DOWN",), reason="burstd: x"), None, False),  # not a cloud node
])
def test_plan_clears_only_burstd_reasons_on_powered_down_idle_cloud_nodes(node, lease, cleared):
    world = World(NOW, NOW, Snapshot(taken_at=NOW, nodes=(node,)), {"local": ()}, (lease,) if lease else ())
    clears = [a for a in plan_leases(world, CFG) if isinstance(a, ClearReason)]
    assert clears == ([ClearReason(node.name, node.reason)] if cleared else [])
