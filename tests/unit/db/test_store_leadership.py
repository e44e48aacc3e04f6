"""The leader row and the fence (``burstd.db.leadership``), on SQLite and on a real PostgreSQL 15: a claim renews
or takes over an expired lead with a higher epoch, and a cloud intent written under a stale epoch is refused with
nothing written."""

from __future__ import annotations

import threading

import pytest

from burstd.db.store import Fence, Fenced, Store
from burstd.domain.lease import LeaseState

S = LeaseState


def test_claims_renew_the_holder_and_take_over_only_an_expired_lead_with_a_new_epoch(store):
    assert store.leader() is None
    first = store.claim_leadership("a", 10, now=100)
    assert (first.holder, first.epoch, first.since, first.expires_at) == ("a", 1, 100, 110)
    assert store.claim_leadership("b", 10, now=109.9).holder == "a"  # still a's
    renewed = store.claim_leadership("a", 10, now=105)
    assert (renewed.epoch, renewed.since, renewed.expires_at) == (1, 100, 115)
    taken = store.claim_leadership("b", 10, now=115)
    assert (taken.holder, taken.epoch, taken.since) == ("b", 2, 115)
    back = store.claim_leadership("a", 10, now=126)  # a comes back later: a new term, never epoch 1 again
    assert (back.holder, back.epoch) == ("a", 3)
    assert store.resign_leadership("a") and store.claim_leadership("b", 10, now=127).epoch == 4


def test_a_stale_epoch_cannot_record_launching_terminating_or_an_orphan_kill(store):
    store.claim_leadership("a", 10, now=100)
    old = Fence("a", 1)
    lease = store.create_lease(pool="p", node_name="n1", reason="resume")
    done = store.create_lease(pool="p", node_name="n2", reason="resume")
    store.transition(done.lease_id, S.LAUNCHING, "ok", fence=old)
    store.transition(done.lease_id, S.BOOTING, "ok", fence=old, instance_id="i-1", launched_at=100.0)
    store.claim_leadership("b", 10, now=111)  # a's lead ran out; b took over
    with pytest.raises(Fenced, match="epoch 2 is held by b"):
        store.transition(lease.lease_id, S.LAUNCHING, "late", fence=old)
    with pytest.raises(Fenced):
        store.transition(done.lease_id, S.TERMINATING, "late", fence=old)
    with pytest.raises(Fenced):
        store.record_orphan_termination("p", "i-9", reason="late", fence=old)
    with pytest.raises(Fenced):
        store.check_fence(old)
    assert store.lease(lease.lease_id).state == S.REQUESTED and store.lease(done.lease_id).state == S.BOOTING
    assert [e.to_state for e in store.events(lease.lease_id)] == [S.REQUESTED]  # nothing written
    assert store.orphan_terminations() == []
    new = Fence("b", 2)
    assert store.transition(lease.lease_id, S.LAUNCHING, "b", fence=new).state == S.LAUNCHING
    # each fenced move's event names the epoch and leader it was written under (the audit of who acted)
    assert [(e.to_state, e.extra.get("epoch"), e.extra.get("leader")) for e in store.events(done.lease_id)] == [
        (S.REQUESTED, None, None), (S.LAUNCHING, 1, "a"), (S.BOOTING, 1, "a")]
    assert store.events(lease.lease_id)[-1].extra["epoch"] == 2
    store.record_orphan_termination("p", "i-9", reason="no lease", fence=new)
    assert [(o["instance_id"], o["epoch"]) for o in store.orphan_terminations()] == [("i-9", 2)]


def test_concurrent_claims_on_an_expired_lead_elect_exactly_one(db_url):
    """Eight would-be leaders (each its own Store, as on separate hosts) race for an expired lead."""
    stores = [Store.open(db_url) for _ in range(8)]
    try:
        stores[0].claim_leadership("old", 5, now=0)
        barrier = threading.Barrier(len(stores))
        results: list = [None] * len(stores)

        def claim(i: int) -> None:
            barrier.wait()
            results[i] = stores[i].claim_leadership(f"h{i}", 10, now=100)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(stores))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = {r.holder for r in results}
        assert len(winners) == 1 and {r.epoch for r in results} == {2}
        assert stores[0].leader().holder in winners
    finally:
        for s in stores:
            s.close()


@pytest.mark.postgres
def test_postgres_orders_a_fenced_intent_against_a_takeover(postgres_url):
    """An intent whose transaction checked the fence holds the leader row: a takeover waits for it to commit, and
    the deposed leader's next intent is refused. The database's clock judges expiry (now=None)."""
    a, b = Store.open(postgres_url), Store.open(postgres_url)
    try:
        rec = a.claim_leadership("a", 2)
        fence = rec.fence
        lease = a.create_lease(pool="p", node_name="n1")
        with a._write() as conn:  # the first half of a transition: the fence checked, not yet committed
            a._check_fence(conn, fence)
            taken: list = []
            t = threading.Thread(target=lambda: taken.append(b.claim_leadership("b", 2, now=rec.expires_at + 1)))
            t.start()
            t.join(0.5)
            assert t.is_alive() and not taken  # the takeover waits on the row lock
        t.join(5)
        assert taken[0].holder == "b" and taken[0].epoch == 2
        with pytest.raises(Fenced):
            a.transition(lease.lease_id, S.LAUNCHING, "late", fence=fence)
        assert a.leader().holder == "b" and a.leader().now > 0
    finally:
        a.close()
        b.close()
