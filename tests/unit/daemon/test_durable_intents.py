"""Admin, hook and agent requests survive a daemon killed before the next cycle; a resumed node leaves DRAINING."""

from __future__ import annotations


from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.lease import LeaseState
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState


def ready_lease(clock, store, adapter, provider, rec, node="cloud1"):
    adapter.set_node(node, "IDLE", "POWERING_UP")
    rec.intake.request_resume([node])
    rec.cycle()
    adapter.set_node(node, "IDLE")
    clock.advance(5)
    rec.cycle()
    lease = next(x for x in store.leases() if x.node_name == node)
    assert lease.state == S.READY
    return lease


def test_drain_and_terminate_requested_before_a_crash_are_applied_after_the_restart():
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    one = ready_lease(clock, store, adapter, provider, rec, "cloud1")
    two = ready_lease(clock, store, adapter, provider, rec, "cloud2")

    rec.intake.add_intent("drain", ["cloud1"], "maintenance")
    rec.intake.add_intent("terminate", ["cloud2"], "bad node")
    saved = store.intents()
    assert [(i.kind, i.node, i.reason) for i in saved] == [
        ("drain", "cloud1", "maintenance"), ("terminate", "cloud2", "bad node")]

    # the daemon dies here (no cycle); a new one starts on the same store
    rec2 = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    clock.advance(5)
    rec2.cycle()
    assert store.lease(one.lease_id).state == S.DRAINING
    assert ("drain", ("cloud1",), "maintenance") in adapter.calls
    assert store.lease(two.lease_id).state in (S.TERMINATING, S.TERMINATED)
    assert store.intents() == []  # consumed

    # applying the same requests again (a crash after applying, before forgetting) changes nothing
    store.queue_intents([(i.kind, i.node, i.reason, i.at) for i in saved])
    rec3 = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    drains = sum(1 for c in adapter.calls if c[0] == "drain")
    rec3.cycle()
    assert sum(1 for c in adapter.calls if c[0] == "drain") == drains
    assert store.lease(one.lease_id).state == S.DRAINING


def test_a_request_that_cannot_be_stored_is_refused_not_lost_silently():
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)

    def broken(items):
        raise OSError("disk full")

    store.queue_intents = broken
    try:
        rec.intake.add_intent("drain", ["cloud1"], "x")
    except OSError:
        pass
    else:
        raise AssertionError("add_intent answered although nothing was stored")
    assert rec.intake.pending() == []


def test_draining_lease_whose_node_was_undrained_goes_back_to_ready():
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    lease = ready_lease(clock, store, adapter, provider, rec)
    rec.intake.add_intent("drain", ["cloud1"], "maintenance")
    adapter.set_node("cloud1", "IDLE", "DRAIN")
    rec.cycle()
    clock.advance(5)
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.DRAINING  # still drained in Slurm
    adapter.set_node("cloud1", "IDLE")  # scontrol update nodename=cloud1 state=resume
    clock.advance(5)
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.READY
