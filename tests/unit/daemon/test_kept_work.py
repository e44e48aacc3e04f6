"""The work a requeued job kept, as the daemon tells decide(): the same figure the replay passes."""

from __future__ import annotations

from burstd.daemon.kept_work import kept_work, requeued_since
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.slurm import Job, Snapshot
from burstd.policy.progress import kept_work_s
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState
H = 3600.0


def pending(jid: int, restarts: int, submit: int = 100) -> Job:
    return Job(jid, "j", "u", "a", ("onprem",), "PENDING", reason="Resources", submit_time=submit,
               restart_count=restarts)


def ended(lid: str, jobs: tuple[int, ...], ready: float | None, end: float | None, gang: str | None = None) -> Lease:
    return Lease(lid, "local", f"n-{lid}", S.TERMINATED, ready_at=ready, ended_at=end, job_ids=jobs, gang=gang)


def test_kept_work_counts_whole_checkpoint_intervals_of_each_run():
    assert kept_work_s([2.5 * H, 0.9 * H, 1.0 * H], H) == 3 * H  # 2 + 0 + 1 intervals
    assert kept_work_s([], H) == 0.0
    assert kept_work_s([-5.0], H) == 0.0


def test_each_requeued_job_keeps_its_own_runs_and_a_gang_runs_only_while_all_its_nodes_are_up():
    snap = Snapshot(10 * H, (pending(1, 1), pending(2, 2), pending(3, 0),
                             Job(4, "r", "u", "a", ("onprem",), "RUNNING", restart_count=1)))
    leases = [
        ended("a", (1,), 0.0, 2.5 * H),  # job 1: one run of 2.5 h -> 2 h kept
        ended("b1", (2,), 0.0, 3.2 * H, gang="b1"), ended("b2", (2,), 0.5 * H, 4.0 * H, gang="b1"),  # 2.7 h
        ended("c", (2,), 5 * H, 6.1 * H),  # job 2's second run: 1.1 h
        ended("d", (3,), 0.0, 5 * H),  # job 3 was never requeued: not asked about
        ended("e", (4,), 0.0, 5 * H),  # job 4 runs now
        ended("f", (1,), None, 2 * H),  # never ready: ran nothing
    ]
    assert kept_work(snap, leases, H) == {1: 2 * H, 2: 3 * H}
    assert requeued_since(snap) == 100


def test_no_requeued_job_reads_no_leases():
    assert requeued_since(Snapshot(0.0, (pending(1, 0),))) is None


def test_the_reconciler_passes_the_kept_work_to_the_decider():
    clock = FakeClock()
    store, adapter = FakeStore(clock), FakeAdapter()
    seen: list = []

    def decider(snapshot, leases, budgets, prices, config, now, *, progress=None, data=None,
                failed_spot_launches=None):
        from tests.unit.daemon.first_rule import first_rule
        seen.append(dict(progress or {}))
        return first_rule(snapshot, leases, budgets, prices, config, now)

    now = clock()
    lease = store.create_lease(pool="local", node_name="cloud1", job_ids=(7,))
    store._leases[lease.lease_id] = Lease(lease.lease_id, "local", "cloud1", S.TERMINATED, ready_at=now - 3 * H,
                                          ended_at=now - 0.5 * H, job_ids=(7,))
    adapter.jobs = [pending(7, 1, submit=int(now - 4 * H))]
    rec = Reconciler(CFG, store, adapter, {"local": FakeProvider("local", clock)}, decider, clock=clock)
    rec.cycle()
    assert seen == [{7: 2 * H}]  # 2.5 h on the cloud, hourly checkpoints (policy.checkpoint_interval_s)
