"""A lost node's requeue survives a daemon killed in the middle of it, and is never made twice (issue 22, item 2).

The daemon is "killed" at the crash points around the requeue calls (``fail.before_requeue``,
``fail.after_requeue``): the point raises out of the cycle, and a new Reconciler starts on the same store, Slurm
and provider, as a restarted daemon does. The integration crash test (tests/integration/test_crash_requeue.py) kills the
real daemon process at the same points on a live Slurm bed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstd.daemon import executor as executor_module
from burstd.daemon.reconcile import Reconciler
from burstd.daemon.requeue_record import REQUEUE, OwedRequeue, decode, encode
from burstd.domain.lease import LeaseState
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG
from tests.unit.daemon.test_requeue_after_failure import ready

S = LeaseState


class Killed(BaseException):
    """The daemon died here (a BaseException: no ``except Exception`` of the cycle catches it)."""


class SlurmLike(FakeAdapter):
    """A requeued job is PENDING again, as in Slurm (the plain fake only records the call)."""

    def requeue(self, job_id, *, expedite=False):
        super().requeue(job_id, expedite=expedite)
        self.jobs = [replace(j, state="PENDING", nodes="") if j.job_id == job_id else j for j in self.jobs]


def _kill_at(monkeypatch, point):
    def crash_point(name):
        if name == point:
            raise Killed(name)
    monkeypatch.setattr(executor_module, "crash_point", crash_point)


def _lost_node(monkeypatch, point):
    """Two jobs on cloud1; its VM vanishes; the daemon dies at ``point``; a new one starts."""
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), SlurmLike(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    lease = ready(clock, store, adapter, provider, rec, "cloud1", (51,))
    adapter.add_job(51, "RUNNING", "cloud1")
    adapter.add_job(52, "RUNNING", "cloud1")
    provider.instances.clear()  # reclaimed, no notice
    clock.advance(5)
    _kill_at(monkeypatch, point)
    with pytest.raises(Killed):
        rec.cycle()
    monkeypatch.undo()
    assert store.lease(lease.lease_id).state == S.FAILED
    return clock, store, adapter, provider, lease


@pytest.mark.parametrize("point", ["fail.before_requeue", "fail.after_requeue"])
def test_a_daemon_killed_around_the_requeue_calls_requeues_each_job_exactly_once(monkeypatch, point):
    clock, store, adapter, provider, lease = _lost_node(monkeypatch, point)
    before = sorted(c[1] for c in adapter.calls if c[0] == "requeue")
    assert before == ([] if point == "fail.before_requeue" else [51, 52])
    assert [i.kind for i in store.intents()] == [REQUEUE]  # still owed, as far as the store knows
    rec2 = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    for _ in range(3):
        clock.advance(5)
        rec2.cycle()
    assert sorted(c[1] for c in adapter.calls if c[0] == "requeue") == [51, 52]
    assert sorted(adapter.expedited) == [51, 52]  # a running node taken away: eligible again at once
    assert store.intents() == []
    assert store.lease(lease.lease_id).state in (S.TERMINATING, S.TERMINATED)


def test_without_a_crash_the_owed_record_is_gone_once_the_jobs_are_requeued(monkeypatch):
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), SlurmLike(), FakeProvider("local", clock)
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    ready(clock, store, adapter, provider, rec, "cloud1", (61,))
    adapter.add_job(61, "RUNNING", "cloud1")
    provider.instances.clear()
    clock.advance(5)
    rec.cycle()
    assert [c[1] for c in adapter.calls if c[0] == "requeue"] == [61] and store.intents() == []


def test_an_owed_requeue_leaves_a_job_running_on_a_newer_lease_of_the_same_node_alone(monkeypatch):
    """The job came back and runs on cloud1 again, under a new lease, when the owed record is read: not ours."""
    clock, store, adapter, provider, lease = _lost_node(monkeypatch, "fail.after_requeue")
    store.transition(lease.lease_id, S.TERMINATING, "x")
    store.transition(lease.lease_id, S.TERMINATED, "x")
    adapter.jobs = [replace(j, state="RUNNING", nodes="cloud1") for j in adapter.jobs]
    store.create_lease(pool="local", node_name="cloud1", job_ids=(51, 52))
    calls = len(adapter.calls)
    rec2 = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    clock.advance(5)
    rec2.cycle()
    assert [c for c in adapter.calls[calls:] if c[0] == "requeue"] == [] and store.intents() == []


def test_a_malformed_record_is_dropped_with_a_warning_not_an_error(monkeypatch, caplog):
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), SlurmLike(), FakeProvider("local", clock)
    store.queue_intents([(REQUEUE, "cloud1", "{not json", clock())])
    rec = Reconciler(CFG, store, adapter, {"local": provider}, first_rule, clock=clock)
    rec.cycle()
    assert rec.last_report is not None and rec.last_report.errors == []
    assert store.intents() == [] and not [c for c in adapter.calls if c[0] == "requeue"]


@pytest.mark.parametrize("text, key", [
    ("[]", "JSON object"), ('{"lease": "", "jobs": [], "since": 1, "expedite": true}', "'lease'"),
    ('{"lease": "L", "jobs": [0], "since": 1, "expedite": true}', "'jobs'"),
    ('{"lease": "L", "jobs": [true], "since": 1, "expedite": true}', "'jobs'"),
    ('{"lease": "L", "jobs": [1], "since": NaN, "expedite": true}', "'since'"),
    ('{"lease": "L", "jobs": [1], "since": 1, "expedite": 1}', "'expedite'"),
])
def test_decode_names_the_key_that_is_wrong(text, key):
    with pytest.raises(ValueError, match=key):
        decode(text)


@given(st.builds(OwedRequeue, st.text(min_size=1), st.lists(st.integers(1, 2**40)).map(tuple),
                 st.floats(allow_nan=False, allow_infinity=False), st.booleans()))
def test_encode_then_decode_is_the_identity(owed):
    assert decode(encode(owed)) == owed


@given(st.text())
def test_decode_of_any_text_answers_a_record_or_a_value_error(text):
    try:
        decode(text)
    except ValueError:
        pass
