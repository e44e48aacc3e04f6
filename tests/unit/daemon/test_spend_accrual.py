"""SpendAccrual on a real SQLite Store: allocations from snapshots, chunked accrual that sums to the lease cost,
and a lease that closed while the daemon was down is accrued by the first run after a restart."""

from __future__ import annotations

import pytest

from burstd.daemon.reconcile import Reconciler
from burstd.daemon.spend import SpendAccrual
from burstd.db.store import Fenced, Store
from burstd.domain.lease import LeaseState as S
from burstd.domain.slurm import Job, Snapshot
from burstd.domain.ledger import lease_cost
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG

T0 = 1_773_144_000.0


def _lease(store, node="cloud1", account="chem"):
    lease = store.create_lease(pool="local", node_name=node, market="spot", price_per_hour_micros=3_600_000,
                               job_ids=(7,), account=account, reason="test", at=T0 - 60)
    store.transition(lease.lease_id, S.LAUNCHING, "go", at=T0 - 30)
    store.transition(lease.lease_id, S.BOOTING, "up", at=T0, instance_id="i-1", launched_at=T0)
    return store.transition(lease.lease_id, S.READY, "registered", at=T0 + 60)


def _snap(*jobs):
    return Snapshot(taken_at=0.0, jobs=tuple(jobs), nodes=())


def test_accrual_in_chunks_attributes_jobs_and_sums_to_the_lease_cost(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/b.db")
    lease = _lease(store)
    acc = SpendAccrual(store)
    acc.run(_snap(), T0 + 100)
    job = Job(7, "j", "ann", "bio", ("cloud",), "RUNNING", nodes="cloud1", start_time=int(T0 + 100), cpus=2)
    for t in range(200, 1000, 100):
        acc.run(_snap(job), T0 + t)
    acc.run(_snap(), T0 + 1000)  # the job is gone: its allocation ends here
    store.transition(lease.lease_id, S.TERMINATING, "done", at=T0 + 1100)
    store.transition(lease.lease_id, S.TERMINATED, "gone", at=T0 + 1200)
    acc.run(_snap(), T0 + 1300)
    done = store.lease(lease.lease_id)
    assert done.accrued_until == done.ended_at == T0 + 1200
    by_job = store.spend(by="job")
    assert sum(by_job.values()) == lease_cost(done, done.ended_at, store.price_points(done.lease_id)) == 1_200_000
    assert by_job["7"] == 900_000  # T0+100 .. T0+1000 at $3.60/h
    assert store.spend(by="account") == {"bio": 900_000, "chem": 300_000}  # overhead to the lease's account
    store.close()


def test_a_lease_closed_while_the_daemon_was_down_is_accrued_after_restart(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/b.db")
    lease = _lease(store)
    SpendAccrual(store).run(_snap(), T0 + 500)
    store.transition(lease.lease_id, S.TERMINATING, "done", at=T0 + 600)
    store.transition(lease.lease_id, S.TERMINATED, "gone", at=T0 + 700)
    fresh = SpendAccrual(store)  # the daemon restarted
    fresh.run(_snap(), T0 + 5000)
    assert store.lease(lease.lease_id).accrued_until == T0 + 700
    assert sum(store.spend(by="lease").values()) == 700_000
    fresh.run(_snap(), T0 + 6000)  # nothing twice
    assert sum(store.spend(by="lease").values()) == 700_000
    store.close()


def test_open_leases_accrue_once_per_interval_closed_ones_at_once(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/b.db")
    lease = _lease(store)
    acc = SpendAccrual(store, interval_s=60)
    acc.run(_snap(), T0 + 100)
    assert store.lease(lease.lease_id).accrued_until == T0 + 100
    acc.run(_snap(), T0 + 130)  # within the interval: nothing new
    assert store.lease(lease.lease_id).accrued_until == T0 + 100
    acc.run(_snap(), T0 + 160)
    assert store.lease(lease.lease_id).accrued_until == T0 + 160
    store.transition(lease.lease_id, S.TERMINATING, "done", at=T0 + 165)
    store.transition(lease.lease_id, S.TERMINATED, "gone", at=T0 + 170)
    acc.run(_snap(), T0 + 175)  # closed: accrued to its end now, not at the next interval
    assert store.lease(lease.lease_id).accrued_until == T0 + 170
    assert sum(store.spend(by="lease").values()) == 170_000
    store.close()


def test_the_accrual_is_written_under_the_leaders_fence(tmp_path):
    """The daemon's one accrual path (``Store.accrue_spend``) checks the fence in its own transaction: a deposed
    leader writes no spend and its cycle ends (``Fenced`` is not swallowed like a retryable failure)."""
    store = Store.open(f"sqlite:///{tmp_path}/b.db")
    lease = _lease(store)
    first = store.claim_leadership("head1", 10, now=T0).fence
    acc = SpendAccrual(store)
    acc.run(_snap(), T0 + 100, fence=first)
    assert store.lease(lease.lease_id).accrued_until == T0 + 100
    store.claim_leadership("head2", 10, now=T0 + 200)  # head1's claim ran out: head2 leads a new epoch
    with pytest.raises(Fenced):
        acc.run(_snap(), T0 + 300, fence=first)
    assert store.lease(lease.lease_id).accrued_until == T0 + 100
    assert sum(store.spend(by="lease").values()) == 100_000
    store.close()


def test_the_cycle_accrues_through_the_spend_ledger_port():
    """With the unit fakes the spend step runs for real (it failed silently inside every cycle before the ports
    declared it): a READY lease's spend is accrued up to the cycle, attributed to the job on its node."""
    clock = FakeClock(T0)
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    rec.intake.request_resume(["cloud1"], {"cloud1": (7,)})
    rec.cycle()
    adapter.set_node("cloud1", "MIXED")
    adapter.add_job(7, "RUNNING", "cloud1")
    clock.advance(600)
    rec.cycle()  # job 7 is seen on the node from here
    clock.advance(600)
    report = rec.cycle()
    lease = store.leases()[0]
    assert report.errors == [] and lease.launched_at == T0 and lease.accrued_until == T0 + 1200
    assert sum(iv.cost_micros for iv in store.spend_log) == lease_cost(lease, T0 + 1200) == 166_667  # $0.50/h
    assert sum(iv.cost_micros for iv in store.spend_log if iv.job_id == 7) == 166_667 - 83_333  # its 600 s
