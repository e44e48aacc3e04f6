"""Leases in the Store: durable intent, checked and evented transitions, compare-and-set, one open lease per node."""

from __future__ import annotations

import threading
from dataclasses import FrozenInstanceError

import pytest

from burstd.db.store import LeaseNotFound, NodeBusy, StaleLease, Store
from burstd.domain.lease import ALLOWED, LIVE_STATES, IllegalTransition, Lease, LeaseState

S = LeaseState


def _walk(store: Store, lease_id: str, *states: LeaseState, t0: float = 1000.0) -> Lease:
    lease = store.lease(lease_id)
    for i, st in enumerate(states):
        lease = store.transition(lease_id, st, f"to {st}", at=t0 + i)
    return lease


def test_create_lease_is_committed_and_visible_to_a_second_store(store, db_url):
    lease = store.create_lease(pool="aws-a", node_name="aws-a-1", market="spot", price_per_hour_micros=410_000,
                               job_ids=(7, 8), account="chem", reason="job 7 burst", at=100.0)
    assert len(lease.lease_id) == 32 and int(lease.lease_id, 16) >= 0
    other = Store.open(db_url)
    try:
        seen = other.lease(lease.lease_id)
    finally:
        other.close()
    assert seen == lease
    assert seen.state == S.REQUESTED and seen.job_ids == (7, 8) and seen.price_per_hour_micros == 410_000
    assert seen.created_at == seen.state_since == 100.0 and seen.account == "chem"


def test_leases_are_frozen_values_not_live_rows(store):
    lease = store.create_lease(pool="p", node_name="n1")
    with pytest.raises(FrozenInstanceError):
        lease.state = S.READY  # type: ignore[misc]
    store.transition(lease.lease_id, S.LAUNCHING, "go")
    assert lease.state == S.REQUESTED  # the old value did not change under us


def test_full_life_records_every_transition_with_time_and_reason(store):
    lease = store.create_lease(pool="p", node_name="n1", reason="asked by job 1", at=10.0)
    store.transition(lease.lease_id, S.LAUNCHING, "fleet request", at=11.0)
    store.transition(lease.lease_id, S.BOOTING, "instance up", at=12.0, instance_id="i-1", launched_at=11.5)
    store.transition(lease.lease_id, S.READY, "slurmd registered", at=20.0)
    store.transition(lease.lease_id, S.DRAINING, "preemption notice", at=30.0)
    store.transition(lease.lease_id, S.TERMINATING, "idle", at=40.0)
    final = store.transition(lease.lease_id, S.TERMINATED, "instance gone", at=41.0)
    assert final.state == S.TERMINATED and final.instance_id == "i-1"
    assert (final.launched_at, final.ready_at, final.ended_at, final.state_since) == (11.5, 20.0, 41.0, 41.0)
    events = store.events(lease.lease_id)
    assert [(e.from_state, e.to_state, e.at, e.reason) for e in events] == [
        (None, S.REQUESTED, 10.0, "asked by job 1"),
        (S.REQUESTED, S.LAUNCHING, 11.0, "fleet request"),
        (S.LAUNCHING, S.BOOTING, 12.0, "instance up"),
        (S.BOOTING, S.READY, 20.0, "slurmd registered"),
        (S.READY, S.DRAINING, 30.0, "preemption notice"),
        (S.DRAINING, S.TERMINATING, 40.0, "idle"),
        (S.TERMINATING, S.TERMINATED, 41.0, "instance gone"),
    ]
    assert events[2].extra == {"instance_id": "i-1", "launched_at": 11.5}


@pytest.mark.parametrize("current", list(S))
def test_every_disallowed_move_is_refused_and_writes_nothing(store, current):
    paths = {
        S.REQUESTED: [], S.LAUNCHING: [S.LAUNCHING], S.BOOTING: [S.LAUNCHING, S.BOOTING],
        S.READY: [S.LAUNCHING, S.BOOTING, S.READY], S.DRAINING: [S.LAUNCHING, S.BOOTING, S.READY, S.DRAINING],
        S.TERMINATING: [S.LAUNCHING, S.TERMINATING], S.TERMINATED: [S.LAUNCHING, S.TERMINATING, S.TERMINATED],
        S.REFUSED: [S.REFUSED], S.FAILED: [S.LAUNCHING, S.FAILED],
    }
    lease = store.create_lease(pool="p", node_name="n1")
    before = _walk(store, lease.lease_id, *paths[current])
    assert before.state == current
    n_events = len(store.events(lease.lease_id))
    for target in S:
        if target in ALLOWED[current]:
            continue
        with pytest.raises(IllegalTransition, match=f"{current} -> {target}"):
            store.transition(lease.lease_id, target, "should fail", instance_id="i-bogus")
    assert store.lease(lease.lease_id) == before
    assert len(store.events(lease.lease_id)) == n_events


def test_expect_guards_against_acting_on_a_stale_view(store):
    lease = store.create_lease(pool="p", node_name="n1")
    store.transition(lease.lease_id, S.LAUNCHING, "go")
    with pytest.raises(StaleLease, match="is LAUNCHING, not REQUESTED"):
        store.transition(lease.lease_id, S.REFUSED, "budget", expect=S.REQUESTED)
    assert store.lease(lease.lease_id).state == S.LAUNCHING
    moved = store.transition(lease.lease_id, S.FAILED, "timeout", expect=[S.LAUNCHING, S.BOOTING])
    assert moved.state == S.FAILED


def test_two_writers_racing_on_one_lease_exactly_one_wins(db_url):
    """Eight threads, each with its own Store, all try to move the same lease LAUNCHING -> (BOOTING|FAILED)."""
    setup = Store.open(db_url)
    lease = setup.create_lease(pool="p", node_name="n1")
    setup.transition(lease.lease_id, S.LAUNCHING, "go")
    results: list[str] = []
    barrier = threading.Barrier(8)

    def racer(i: int) -> None:
        s = Store.open(db_url, migrate_to_head=False)
        try:
            barrier.wait()
            target = S.BOOTING if i % 2 else S.FAILED
            try:
                s.transition(lease.lease_id, target, f"racer {i}", expect=S.LAUNCHING)
                results.append("won")
            except (StaleLease, IllegalTransition):
                results.append("lost")
        finally:
            s.close()

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == ["lost"] * 7 + ["won"]
    events = setup.events(lease.lease_id)
    assert [e.from_state for e in events].count(S.LAUNCHING) == 1
    setup.close()


def test_one_open_lease_per_node(store):
    first = store.create_lease(pool="p", node_name="n1", at=1.0)
    with pytest.raises(NodeBusy, match=f"n1 already has an open lease: lease {first.lease_id}"):
        store.create_lease(pool="p", node_name="n1")
    # FAILED may still own a VM: the node stays taken
    _walk(store, first.lease_id, S.LAUNCHING, S.FAILED)
    with pytest.raises(NodeBusy):
        store.create_lease(pool="p", node_name="n1")
    assert store.lease_for_node("n1").lease_id == first.lease_id
    store.transition(first.lease_id, S.TERMINATED, "no instance found")
    assert store.lease_for_node("n1") is None
    second = store.create_lease(pool="p", node_name="n1", at=5.0)
    assert store.lease_for_node("n1").lease_id == second.lease_id
    assert [x.lease_id for x in store.leases(node="n1")] == [first.lease_id, second.lease_id]


def test_refused_lease_frees_the_node(store):
    lease = store.create_lease(pool="p", node_name="n1")
    refused = store.transition(lease.lease_id, S.REFUSED, "account chem over budget")
    assert refused.ended_at is not None and refused.reason == "account chem over budget"
    assert store.lease_for_node("n1") is None


def test_queries_by_state_pool_and_limit(store):
    ids = {}
    for i, (pool, path) in enumerate([
        ("a", []), ("a", [S.LAUNCHING]), ("b", [S.LAUNCHING, S.BOOTING, S.READY]),
        ("b", [S.REFUSED]), ("a", [S.LAUNCHING, S.TERMINATING, S.TERMINATED]),
    ]):
        lease = store.create_lease(pool=pool, node_name=f"n{i}", at=float(i))
        ids[i] = _walk(store, lease.lease_id, *path, t0=100.0 + i).lease_id
    live = store.leases(states=LIVE_STATES)
    assert [x.lease_id for x in live] == [ids[1], ids[2]]
    assert [x.lease_id for x in store.leases(pool="b")] == [ids[2], ids[3]]
    assert [x.lease_id for x in store.leases(limit=2)] == [ids[3], ids[4]]
    assert [x.lease_id for x in store.leases(states=["REQUESTED"])] == [ids[0]]


def test_update_sets_fields_without_a_move_and_logs_it(store):
    lease = store.create_lease(pool="p", node_name="n1", job_ids=(1,))
    store.transition(lease.lease_id, S.LAUNCHING, "go")
    upd = store.update(lease.lease_id, "fleet answered", instance_id="i-9", attempt=2, job_ids=(1, 2))
    assert (upd.state, upd.instance_id, upd.attempt, upd.job_ids) == (S.LAUNCHING, "i-9", 2, (1, 2))
    ev = store.events(lease.lease_id)[-1]
    assert (ev.from_state, ev.to_state, ev.extra) == (S.LAUNCHING, S.LAUNCHING,
                                                      {"instance_id": "i-9", "attempt": 2, "job_ids": [1, 2]})
    with pytest.raises(TypeError, match="unknown lease field"):
        store.update(lease.lease_id, "x", state="READY")
    with pytest.raises(StaleLease):
        store.update(lease.lease_id, "x", instance_id="i-0", expect=S.BOOTING)
    assert store.lease(lease.lease_id).instance_id == "i-9"


def test_note_and_events_filters(store):
    a = store.create_lease(pool="p", node_name="n1", at=1.0)
    b = store.create_lease(pool="p", node_name="n2", at=2.0)
    store.note(a.lease_id, "launch throttled, retrying", at=3.0, error="RequestLimitExceeded")
    assert [e.reason for e in store.events(node="n1")] == ["", "launch throttled, retrying"]
    assert store.events(a.lease_id)[-1].extra == {"error": "RequestLimitExceeded"}
    assert [e.lease_id for e in store.events(since=2.0)] == [b.lease_id, a.lease_id]
    assert [e.at for e in store.events(limit=1)] == [3.0]


def test_unknown_lease_is_a_clear_error(store):
    with pytest.raises(LeaseNotFound, match="no lease 'nope'"):
        store.transition("nope", S.LAUNCHING, "x")
    with pytest.raises(LeaseNotFound):
        store.lease("nope")
    with pytest.raises(LeaseNotFound):
        store.note("nope", "x")


def test_bad_fields_are_rejected_before_writing(store):
    lease = store.create_lease(pool="p", node_name="n1")
    with pytest.raises(ValueError, match="price_per_hour_micros"):
        store.transition(lease.lease_id, S.LAUNCHING, "go", price_per_hour_micros=-1)
    with pytest.raises(ValueError, match="price_per_hour_micros"):
        store.create_lease(pool="p", node_name="n2", price_per_hour_micros=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="launched_at must be a finite time"):
        store.transition(lease.lease_id, S.LAUNCHING, "go", launched_at=float("nan"))
    assert store.lease(lease.lease_id).state == S.REQUESTED
    assert store.lease_for_node("n2") is None


@pytest.mark.parametrize(
    "path,ended",
    [
        ([S.LAUNCHING, S.BOOTING, S.READY, S.TERMINATING, S.TERMINATED], 14.0),  # normal life: termination time
        ([S.LAUNCHING, S.FAILED, S.TERMINATED], 11.0),  # failed, no instance found: spend stopped at the failure
        ([S.LAUNCHING, S.BOOTING, S.FAILED, S.TERMINATING, S.TERMINATED], 14.0),  # failed, instance cleaned up
        ([S.REFUSED], 10.0),
    ],
)
def test_ended_at_is_where_spend_stops(store, path, ended):
    lease = store.create_lease(pool="p", node_name="n1", at=1.0)
    final = _walk(store, lease.lease_id, *path, t0=10.0)
    assert final.ended_at == ended


def test_failed_then_terminating_reopens_the_end(store):
    lease = store.create_lease(pool="p", node_name="n1")
    failed = _walk(store, lease.lease_id, S.LAUNCHING, S.BOOTING, S.FAILED, t0=10.0)
    assert failed.ended_at == 12.0
    assert store.transition(lease.lease_id, S.TERMINATING, "instance found", at=20.0).ended_at is None


def test_a_gang_is_recorded_on_each_member_and_queried_together(store):
    leader = store.create_lease(pool="aws", node_name="aws-1", job_ids=[7], gang="g" * 32, lease_id="g" * 32)
    store.create_lease(pool="aws", node_name="aws-2", job_ids=[7], gang=leader.lease_id)
    store.create_lease(pool="aws", node_name="aws-3", job_ids=[8])
    members = store.leases(gang=leader.lease_id)
    assert [m.node_name for m in members] == ["aws-1", "aws-2"] and {m.gang for m in members} == {leader.lease_id}
    assert store.lease_for_node("aws-3").gang is None
    store.transition(leader.lease_id, LeaseState.LAUNCHING)
    assert [m.node_name for m in store.leases(states=[LeaseState.REQUESTED], gang=leader.lease_id)] == ["aws-2"]
    assert store.events(leader.lease_id)[0].extra["gang"] == leader.lease_id
