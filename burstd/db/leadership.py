"""Who leads the daemons sharing one database, and the fence that keeps a deposed leader from acting.

    rec = store.claim_leadership("head1:4242:ab12", lease_s=15)   # acquire, or renew if already ours
    if rec.holder == "head1:4242:ab12":
        fence = Fence(rec.holder, rec.epoch)
        store.transition(lease_id, LeaseState.LAUNCHING, "...", fence=fence)   # refused once deposed

One row (``leader``, name ``burstd``) says who leads, since when, until when unless renewed, and the fencing
epoch. A claim renews the holder's own lease; anyone else takes over only once it has expired, and a takeover
always increments the epoch. Every cloud intent (a lease's LAUNCHING and TERMINATING moves, an orphan
termination) and every spend accrual the daemon writes (``Store.accrue_spend``) checks the fence *in its own transaction* with an UPDATE of the leader row: on PostgreSQL that
row lock orders the check against any takeover, so an intent either commits under the current epoch or is
refused with ``Fenced`` and nothing is written. Times are the database server's clock on PostgreSQL (two heads
with skewed clocks still agree on when a lease ran out), the local clock on SQLite.
"""

from __future__ import annotations

from sqlalchemy import insert, select, text, update

from burstd.db.engine import StoreBase, _now
from burstd.db.rows import _leader, _orphan_termination
from burstd.domain.leadership import Fence, Fenced, LeaderRecord  # the values live in domain (seam 4)

ELECTION = "burstd"


def _row(r, now: float) -> LeaderRecord:
    return LeaderRecord(r.holder, int(r.epoch), r.since, r.renewed_at, r.expires_at, now)


def check_fence_in(conn, fence: Fence) -> None:
    """Inside a write transaction: the fence's epoch must still be the leader's, else ``Fenced``. The UPDATE
    takes the leader row's lock, so a takeover waits for this transaction (or this one sees it). Call it first in
    the transaction (the leader row's lock, then the lease's: one order for every writer)."""
    res = conn.execute(update(_leader)
                       .where(_leader.c.name == ELECTION, _leader.c.epoch == fence.epoch,
                              _leader.c.holder == fence.holder)
                       .values(epoch=_leader.c.epoch))
    if res.rowcount != 1:
        cur = conn.execute(select(_leader).where(_leader.c.name == ELECTION)).first()
        raise Fenced(fence, None if cur is None else _row(cur, 0.0))


class Leadership(StoreBase):
    def _db_now(self, conn, now: float | None) -> float:
        if now is not None:
            return float(now)
        if conn.dialect.name == "postgresql":
            return float(conn.execute(text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).scalar())
        return _now(None)

    def claim_leadership(self, holder: str, lease_s: float, *, now: float | None = None) -> LeaderRecord:
        """Acquire the lead, or renew it if ``holder`` has it; returns the row as it stands afterwards (compare
        its holder with yours). A takeover (first claim, or the holder's lease expired) increments the epoch."""
        if not holder or lease_s <= 0:
            raise ValueError("a leadership claim needs a holder and a positive lease time")
        with self._write() as conn:
            t = self._db_now(conn, now)
            cur = conn.execute(select(_leader).where(_leader.c.name == ELECTION).with_for_update()).first()
            if cur is None:
                values = {"name": ELECTION, "holder": holder, "epoch": 1, "since": t, "renewed_at": t, "expires_at": t + lease_s}
                conn.execute(insert(_leader).values(**values))
                return LeaderRecord(holder, 1, t, t, t + lease_s, t)
            if cur.holder == holder:
                sets = {"renewed_at": t, "expires_at": max(cur.expires_at, t + lease_s)}
            elif cur.expires_at <= t:
                sets = {"holder": holder, "epoch": cur.epoch + 1, "since": t, "renewed_at": t, "expires_at": t + lease_s}
            else:
                return _row(cur, t)
            conn.execute(update(_leader).where(_leader.c.name == ELECTION).values(**sets))
            new = dict(cur._mapping, **sets)
        return LeaderRecord(new["holder"], int(new["epoch"]), new["since"], new["renewed_at"], new["expires_at"], t)

    def resign_leadership(self, holder: str) -> bool:
        """Give the lead up at once (a clean stop): the standby takes over at its next claim. False if not ours."""
        with self._write() as conn:
            res = conn.execute(update(_leader).where(_leader.c.name == ELECTION, _leader.c.holder == holder)
                               .values(expires_at=0.0))
            return res.rowcount == 1

    def leader(self, *, now: float | None = None) -> LeaderRecord | None:
        """The leader row (who leads, since when, epoch), or None before any daemon claimed it."""
        with self._read() as conn:
            t = self._db_now(conn, now)
            r = conn.execute(select(_leader).where(_leader.c.name == ELECTION)).first()
        return None if r is None else _row(r, t)

    def _check_fence(self, conn, fence: Fence) -> None:
        check_fence_in(conn, fence)

    def check_fence(self, fence: Fence) -> None:
        """Raise ``Fenced`` unless ``fence`` still leads (before repeating an intent recorded earlier, e.g. a
        launch retried while LAUNCHING)."""
        with self._write() as conn:
            self._check_fence(conn, fence)

    def record_orphan_termination(self, pool: str, instance_id: str, *, lease_id: str | None = None,
                                  reason: str = "", fence: Fence | None = None, at: float | None = None) -> int:
        """The intent to terminate an orphan instance, committed (under the fence) before the provider call."""
        with self._write() as conn:
            if fence is not None:
                self._check_fence(conn, fence)
            res = conn.execute(insert(_orphan_termination).values(
                pool=pool, instance_id=instance_id, lease_id=lease_id or None, reason=reason, at=_now(at),
                epoch=None if fence is None else fence.epoch))
            return int(res.inserted_primary_key[0])

    def orphan_terminations(self, *, since: float | None = None) -> list[dict]:
        q = select(_orphan_termination).order_by(_orphan_termination.c.id)
        if since is not None:
            q = q.where(_orphan_termination.c.at >= since)
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(q).all()]
