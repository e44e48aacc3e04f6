"""A job that requeued itself after a notice starts again at once, not after Slurm's requeue hold (issue 22,
item 2): which pending jobs get ``starttime=now``, and the cycle sending it."""

from __future__ import annotations

import pytest

from burstd.daemon.actions import StartNow
from burstd.daemon.reconcile import Reconciler
from burstd.daemon.requeue_hold import MAX_HOLD_S, plan_start_now
from burstd.domain.slurm import Job, Snapshot
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG

NOW = 1_000_000.0


def _job(job_id=7, *, restarts=1, reason="BeginTime", parts=("onprem", "cloud"), begin_in=30.0, hold=False):
    return Job(job_id, "train", "alice", "chem", parts, "PENDING", reason=reason, restart_count=restarts,
               eligible_time=int(NOW + begin_in), hold=hold)


@pytest.mark.parametrize("job, starts", [
    (_job(), True),                                 # requeued itself on a notice: the hold goes
    (_job(restarts=0), False),                      # never requeued: a --begin of its own
    (_job(parts=("onprem",)), False),               # never burst: not burstd's to touch
    (_job(reason="Resources"), False),              # waits for nodes, not for a begin time
    (_job(begin_in=MAX_HOLD_S + 60), False),        # someone set a later start: kept
    (_job(begin_in=-5), False),                     # eligible already
    (_job(hold=True), False),                       # held: an admin's or user's decision
])
def test_only_a_burst_job_waiting_out_its_requeue_hold_starts_now(job, starts):
    snap = Snapshot(taken_at=NOW, jobs=(job,))
    assert plan_start_now(snap, ["cloud"], NOW) == ([StartNow(job.job_id)] if starts else [])
    assert plan_start_now(None, ["cloud"], NOW) == []


def test_the_cycle_sends_starttime_now_for_such_a_job():
    clock = FakeClock(NOW)
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    adapter.jobs = [_job(8), _job(9, restarts=0)]
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    rec.cycle()
    assert [c for c in adapter.calls if c[0] == "start_now"] == [("start_now", 8)]
