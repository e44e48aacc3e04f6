"""Active/standby: two Reconcilers on one store, each with its own Elector (docs/ha.md). Only the leader acts; a
deposed leader's cloud intents are refused by the fence, so it never launches or terminates; the standby stores
hook requests for the leader. The real store's election and fence are tested in tests/unit/db/test_store_leadership.py
(SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from burstd.daemon.actions import Terminate, TerminateOrphan
from burstd.daemon.executor import CycleContext, Executor
from burstd.daemon.leadership import Elector
from burstd.daemon.metrics import Metrics
from burstd.daemon.reconcile import Reconciler
from burstd.domain.leadership import Fence, Fenced
from burstd.domain.lease import LeaseState
from burstd.providers.base import Instance
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState
LEASE_S = 15.0


class Pair:
    """Two daemons (a, b) sharing one store, one Slurm and one cloud, as on two head nodes."""

    def __init__(self):
        self.clock = FakeClock()
        self.store = FakeStore(self.clock)
        self.adapter = FakeAdapter()
        self.provider = FakeProvider("local", self.clock)
        self.elector: dict[str, Elector] = {}
        self.rec: dict[str, Reconciler] = {}
        for name in ("a", "b"):
            el = Elector(self.store, f"head-{name}:1:x", lease_s=LEASE_S, clock=self.clock)
            self.elector[name] = el
            self.rec[name] = Reconciler(CFG, self.store, self.adapter, {"local": self.provider}, first_rule,
                                        clock=self.clock, leadership=el)

    def states(self):
        return {x.node_name: x.state for x in self.store.leases()}


@pytest.fixture
def pair():
    p = Pair()
    p.elector["a"].tick()
    p.elector["b"].tick()
    return p


def test_only_one_daemon_leads_and_the_standby_keeps_requests_for_it(pair):
    assert pair.elector["a"].is_leader and not pair.elector["b"].is_leader
    pair.adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    pair.rec["b"].intake.request_resume(["cloud1"], {"cloud1": (7,)})  # Slurm's hook reached the standby
    assert pair.states() == {"cloud1": S.REQUESTED}  # stored durably, committed before the hook's answer
    report = pair.rec["b"].cycle()
    assert report.role == "standby" and report.actions == {}
    assert pair.provider.launch_calls == [] and pair.states() == {"cloud1": S.REQUESTED}
    assert pair.rec["a"].cycle().role == "leader"
    assert pair.states() == {"cloud1": S.BOOTING} and len(pair.provider.live()) == 1
    # an agent's or admin's request queued on the standby is applied by the leader too
    pair.adapter.set_node("cloud1", "MIXED")
    pair.rec["a"].cycle()
    pair.rec["b"].intake.add_intent("suspend", ["cloud1"])
    pair.rec["b"].cycle()
    assert pair.states() == {"cloud1": S.READY}
    pair.rec["a"].cycle()
    assert pair.states() == {"cloud1": S.TERMINATING} and pair.provider.live() == []


def test_standby_takes_over_only_after_the_lease_runs_out_with_a_higher_epoch(pair):
    a, b = pair.elector["a"], pair.elector["b"]
    pair.clock.advance(LEASE_S - 1)
    assert b.tick() is None  # the leader's lease still runs
    pair.clock.advance(2)
    fence = b.tick()
    assert fence is not None and fence.epoch == 2 and b.status()["leader"] == "head-b:1:x"
    # the old leader, renewing late, learns it lost and stops acting
    assert a.tick() is None and not a.is_leader


def test_a_deposed_leader_that_wakes_late_launches_nothing(pair):
    """a leads, stalls past its lease; b takes over. a's next cycle still believes it leads (it has not renewed
    yet): its LAUNCHING write is refused by the fence, it becomes a standby, and the cloud sees no call from it."""
    a = pair.rec["a"]
    pair.clock.advance(LEASE_S + 1)
    assert pair.elector["b"].tick() is not None
    assert pair.elector["a"].fence == Fence("head-a:1:x", 1)  # stale belief
    pair.adapter.set_node("cloud2", "IDLE", "POWERING_UP")
    a.intake.request_resume(["cloud2"], {"cloud2": (8,)})
    report = a.cycle()
    assert report.role == "deposed" and "deposed" in report.errors[-1]
    assert pair.provider.launch_calls == [] and pair.states() == {"cloud2": S.REQUESTED}
    assert not pair.elector["a"].is_leader and a.cycle().role == "standby"
    pair.rec["b"].cycle()  # the new leader launches it, once
    assert pair.states() == {"cloud2": S.BOOTING} and len(pair.provider.launch_calls) == 1


def test_a_deposed_leader_cannot_repeat_a_terminate_or_kill_an_orphan(pair):
    pair.adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    pair.rec["a"].intake.request_resume(["cloud1"], {"cloud1": (7,)})
    pair.rec["a"].cycle()
    lease = pair.store.leases()[0]
    stale = pair.elector["a"].fence
    ex, cycle = Executor(pair.store, pair.adapter, {"local": pair.provider}, CFG, Metrics(), clock=pair.clock), \
        CycleContext(fence=stale)
    ex.apply([Terminate(lease.lease_id, "suspend")], cycle)  # while a leads: TERMINATING recorded under epoch 1
    assert pair.store.lease(lease.lease_id).state == S.TERMINATING and len(pair.provider.terminate_calls) == 1
    pair.clock.advance(LEASE_S + 1)
    pair.elector["b"].tick()
    with pytest.raises(Fenced):  # the repeat of a recorded TERMINATING checks the fence before the call
        ex.apply([Terminate(lease.lease_id, "suspend")], cycle)
    pair.provider.instances["i-orphan"] = Instance("i-orphan", "gone", "cloud3", "local", "running", 0.0)
    with pytest.raises(Fenced):
        ex.apply([TerminateOrphan("local", "i-orphan", "", "no lease")], cycle)
    assert len(pair.provider.terminate_calls) == 1 and "i-orphan" in pair.provider.instances
    assert pair.store.orphan_log == []
    ex.apply([TerminateOrphan("local", "i-orphan", "", "no lease")], CycleContext(fence=pair.elector["b"].fence))
    assert "i-orphan" not in pair.provider.instances and pair.store.orphan_log[-1]["epoch"] == 2


def test_a_clean_stop_hands_the_lead_over_at_once(pair):
    pair.elector["a"].resign()
    assert not pair.elector["a"].is_leader
    fence = pair.elector["b"].tick()  # no wait for the lease to run out
    assert fence is not None and fence.epoch == 2


class _NoDatabase:
    def claim_leadership(self, *a, **kw):
        raise ConnectionError("could not connect to server")

    def leader(self, **kw):
        raise ConnectionError("could not connect to server")


def test_a_leader_that_loses_the_database_stops_acting(pair):
    el = pair.elector["a"]
    el.store = _NoDatabase()
    assert el.tick() is None and not el.is_leader
    assert "could not connect" in el.status()["error"] and el.status()["role"] == "standby"
    assert pair.rec["a"].cycle().role == "standby"
