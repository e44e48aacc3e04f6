"""The ``Store``: every read and write of burstd's durable state goes through here.

    store = Store.open(config.database.url)     # creates the SQLite file's folder, migrates to head
    lease = store.create_lease(pool="aws-a", node_name="aws-a-3", market="spot", price_per_hour_micros=410_000,
                               job_ids=(1234,), account="chem", reason="job 1234 burst")   # committed on return
    lease = store.transition(lease.lease_id, LeaseState.LAUNCHING, reason="fleet request sent")
    lease = store.transition(lease.lease_id, LeaseState.BOOTING, reason="instance up",
                             instance_id="i-0abc", launched_at=1764201600.0, expect=LeaseState.LAUNCHING)
    store.leases(states=LIVE_STATES) / store.lease(lease_id) / store.lease_for_node("aws-a-3") / store.events(lease_id)
    store.set_budget("chem", "500") / store.budget_book("month", now, config) -> BudgetBook
    store.record_allocations(lease_id, [Allocation(job_id, start, end, account, user)])   # each cycle
    store.close_allocations(lease_id, now, still_running=[job_id, ...])                   # jobs that left
    store.accrue_spend(lease_id, now, fence=fence)   # ledger.accrue over the stored prices and allocations,
                                                     # recorded in one transaction (the daemon's only spend write)
    store.spend(by="account", since=..., until=...)
    store.get_setting("paused") / store.set_setting("paused", "1")

Rules the Store keeps (and nothing more: when to move a lease is the daemon's business):

- Every write is one transaction, committed before the method returns. On SQLite the database runs in WAL
  mode with ``synchronous=FULL`` (a committed lease survives a power cut), ``busy_timeout`` and foreign keys,
  and every write transaction is ``BEGIN IMMEDIATE`` so two writers queue instead of deadlocking.
- ``transition`` checks the move against ``burstd.domain.lease.check_transition`` and applies it as a
  compare-and-set on the state it read: if another writer moved the lease in between, it raises
  ``StaleLease`` and writes nothing. Every transition, field update and note adds a ``LeaseEvent``.
- At most one *open* lease (not TERMINATED/REFUSED) per Slurm node, enforced by a unique column in the
  database: ``create_lease`` raises ``NodeBusy`` naming the open one.
- Reads return frozen domain objects (``Lease``, ``LeaseEvent``, ``BudgetBook``), never live ORM rows.
- Money is integer micro-dollars. A spend interval is counted in the period holding its ``start``;
  ``burstd.domain.ledger`` splits intervals at hour boundaries, so every day/week/month total is exact.

The same code runs on SQLite and PostgreSQL (``postgresql+psycopg2://...``).
"""

from __future__ import annotations

import math
import uuid
from types import SimpleNamespace
from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from burstd.db.daemon_state import Cooldown, DaemonState
from burstd.db.engine import _now, make_engine, migrate
from burstd.db.leadership import Fence, Fenced, LeaderRecord, Leadership
from burstd.domain.store_errors import BudgetError, LeaseNotFound, NodeBusy, SpendConflict, StaleLease, StoreError
from burstd.db.ledger_records import OVERHEAD, SPEND_GROUPS, BudgetEntry, LedgerRecords
from burstd.db.rows import _event, _lease, _row_to_event, _row_to_lease
from burstd.db.progress_records import ProgressRecords
from burstd.db.staging_records import StagingRecords
from burstd.domain.lease import FINAL_STATES, Lease, LeaseEvent, LeaseState, check_transition

__all__ = [
    "OVERHEAD", "SPEND_GROUPS", "BudgetEntry", "BudgetError", "Cooldown", "Fence", "Fenced", "LeaderRecord",
    "LeaseNotFound", "NodeBusy",
    "SpendConflict", "StaleLease", "Store", "StoreError",
]

#: Lease columns a transition or update may set (besides state, reason and timestamps of the move).
LEASE_FIELDS = frozenset(
    {
        "instance_id",
        "offering",
        "launched_at",
        "ready_at",
        "ended_at",
        "price_per_hour_micros",
        "job_ids",
        "account",
        "market",
        "attempt",
    }
)


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}


def _check_fields(fields: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(fields) - LEASE_FIELDS)
    if unknown:
        raise TypeError(f"unknown lease field(s) {', '.join(unknown)}; settable: {', '.join(sorted(LEASE_FIELDS))}")
    out = dict(fields)
    if "job_ids" in out:
        out["job_ids"] = [int(j) for j in out["job_ids"]]
    if "price_per_hour_micros" in out:
        out["price_per_hour_micros"] = _nonneg_int(out["price_per_hour_micros"], "price_per_hour_micros")
    for k in ("launched_at", "ready_at", "ended_at"):
        if out.get(k) is not None:
            v = float(out[k])
            if not math.isfinite(v):
                raise ValueError(f"{k} must be a finite time, got {out[k]!r}")
            out[k] = v
    return out


def _nonneg_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer (micro-dollars), got {value!r}")
    return value



class Store(LedgerRecords, DaemonState, Leadership, StagingRecords, ProgressRecords):
    """burstd's durable state. Thread-safe (one engine, a connection per call); open once per process."""

    @classmethod
    def open(cls, url: str, *, migrate_to_head: bool = True) -> Store:
        engine = make_engine(url)
        if migrate_to_head:
            migrate(engine)
        return cls(engine)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- leases ------------------------------------------------------------------------------------------

    def create_lease(
        self,
        *,
        pool: str,
        node_name: str,
        market: str = "spot",
        price_per_hour_micros: int = 0,
        job_ids: Iterable[int] = (),
        account: str = "",
        reason: str = "",
        offering: str | None = None,
        lease_id: str | None = None,
        gang: str | None = None,
        at: float | None = None,
    ) -> Lease:
        """Record the intent to run a VM for ``node_name`` (state REQUESTED); committed before it returns."""
        if not pool or not node_name:
            raise ValueError("a lease needs a pool and a node name")
        price = _nonneg_int(price_per_hour_micros, "price_per_hour_micros")
        lease_id = lease_id or uuid.uuid4().hex
        at = _now(at)
        row = dict(
            id=lease_id,
            pool=pool,
            node_name=node_name,
            open_node=node_name,
            state=LeaseState.REQUESTED.value,
            market=market,
            instance_id=None,
            offering=offering,
            price_per_hour_micros=price,
            account=account,
            job_ids=[int(j) for j in job_ids],
            created_at=at,
            launched_at=None,
            ready_at=None,
            ended_at=None,
            state_since=at,
            reason=reason,
            attempt=0,
            accrued_until=None,
            gang=gang,
            version=0,
        )
        try:
            with self._write() as conn:
                conn.execute(insert(_lease).values(**row))
                conn.execute(
                    insert(_event).values(
                        lease_id=lease_id,
                        at=at,
                        from_state=None,
                        to_state=LeaseState.REQUESTED.value,
                        reason=reason,
                        extra={"pool": pool, "node": node_name, "market": market, "price_per_hour_micros": price,
                               "job_ids": row["job_ids"], "account": account} | ({"gang": gang} if gang else {}),
                    )
                )
        except IntegrityError:
            held = self.lease_for_node(node_name)
            if held is not None and held.lease_id != lease_id:
                raise NodeBusy(node_name, held) from None
            raise StoreError(f"lease {lease_id} for node {node_name} could not be created (id already used?)") from None
        return _row_to_lease(SimpleNamespace(**row))

    def transition(
        self,
        lease_id: str,
        target: LeaseState | str,
        reason: str = "",
        *,
        at: float | None = None,
        expect: LeaseState | str | Iterable[LeaseState | str] | None = None,
        extra: dict[str, Any] | None = None,
        fence: Fence | None = None,
        **fields: Any,
    ) -> Lease:
        """Move a lease to ``target`` (checked against the state machine) and record the event, atomically.

        ``expect``: the state(s) the caller believes the lease is in; anything else raises ``StaleLease``.
        ``fields``: lease columns to set in the same write (``LEASE_FIELDS``). Unless given: READY sets
        ``ready_at``; FAILED, REFUSED and TERMINATED set ``ended_at`` (where spend stops) to ``at``, except
        FAILED -> TERMINATED (nothing to terminate), which keeps the failure time; FAILED -> TERMINATING clears
        it (the instance found lives until TERMINATED). ``launched_at`` (the provider's launch time, where
        spend starts) is the caller's to give; pass the provider's termination time as ``ended_at`` when known.
        ``fence``: the leader's fencing token (``burstd.db.leadership``), checked in this same transaction; a
        deposed leader's move raises ``Fenced`` and writes nothing. The event records it (``epoch``, ``leader``).
        """
        target = LeaseState(target)
        values = _check_fields(fields)
        at = _now(at)
        expected = None
        if expect is not None:
            expected = {LeaseState(expect)} if isinstance(expect, str) else {LeaseState(e) for e in expect}
        with self._write() as conn:
            if fence is not None:
                self._check_fence(conn, fence)  # first: the leader row's lock, then the lease's (one order)
            cur = conn.execute(select(_lease).where(_lease.c.id == lease_id)).first()
            if cur is None:
                raise LeaseNotFound(f"no lease {lease_id!r}")
            current = LeaseState(cur.state)
            if expected is not None and current not in expected:
                raise StaleLease(lease_id, expected, current)
            check_transition(current, target)
            if target == LeaseState.READY and "ready_at" not in values and cur.ready_at is None:
                values["ready_at"] = at
            if "ended_at" not in values:
                if target in (LeaseState.FAILED, LeaseState.REFUSED):
                    values["ended_at"] = at
                elif target == LeaseState.TERMINATED and (cur.ended_at is None or current != LeaseState.FAILED):
                    values["ended_at"] = at  # FAILED -> TERMINATED (no instance found) keeps the failure time
                elif target == LeaseState.TERMINATING and current == LeaseState.FAILED:
                    values["ended_at"] = None  # an instance of the failed lease lives until it is terminated
            sets = dict(values, state=target.value, state_since=at, reason=reason, version=_lease.c.version + 1)
            if target in FINAL_STATES:
                sets["open_node"] = None
            res = conn.execute(
                update(_lease).where(and_(_lease.c.id == lease_id, _lease.c.state == current.value)).values(**sets)
            )
            if res.rowcount != 1:
                actual = conn.execute(select(_lease.c.state).where(_lease.c.id == lease_id)).scalar_one()
                raise StaleLease(lease_id, {current}, LeaseState(actual))
            conn.execute(
                insert(_event).values(
                    lease_id=lease_id,
                    at=at,
                    from_state=current.value,
                    to_state=target.value,
                    reason=reason,
                    # the fence it was written under: an audit of which leader recorded each cloud intent
                    extra=_jsonable({**values, **(extra or {}),
                                     **({} if fence is None else {"epoch": fence.epoch, "leader": fence.holder})}),
                )
            )
            new = dict(cur._mapping, **{k: v for k, v in sets.items() if k != "version"})
        return _row_to_lease(SimpleNamespace(**new))

    def update(
        self,
        lease_id: str,
        reason: str,
        *,
        at: float | None = None,
        expect: LeaseState | str | Iterable[LeaseState | str] | None = None,
        **fields: Any,
    ) -> Lease:
        """Set lease fields without a state change (e.g. the instance id while LAUNCHING, jobs that joined);
        recorded as an event ``from_state == to_state``. ``expect`` as for ``transition``."""
        values = _check_fields(fields)
        if not values:
            raise TypeError("update() needs at least one field to set")
        at = _now(at)
        with self._write() as conn:
            cur = conn.execute(select(_lease.c.state).where(_lease.c.id == lease_id)).first()
            if cur is None:
                raise LeaseNotFound(f"no lease {lease_id!r}")
            state = LeaseState(cur.state)
            if expect is not None:
                expected = {LeaseState(expect)} if isinstance(expect, str) else {LeaseState(e) for e in expect}
                if state not in expected:
                    raise StaleLease(lease_id, expected, state)
            res = conn.execute(
                update(_lease)
                .where(and_(_lease.c.id == lease_id, _lease.c.state == state.value))
                .values(**values, version=_lease.c.version + 1)
            )
            if res.rowcount != 1:
                raise StaleLease(lease_id, {state}, self._state_in(conn, lease_id))
            conn.execute(
                insert(_event).values(
                    lease_id=lease_id, at=at, from_state=state.value, to_state=state.value, reason=reason,
                    extra=_jsonable(values),
                )
            )
            new = conn.execute(select(_lease).where(_lease.c.id == lease_id)).one()
        return _row_to_lease(new)

    def note(self, lease_id: str, reason: str, *, at: float | None = None, **extra: Any) -> LeaseEvent:
        """Add a line to a lease's event log without changing it (e.g. "launch retried: throttled")."""
        at = _now(at)
        with self._write() as conn:
            state = self._state_in(conn, lease_id)
            res = conn.execute(
                insert(_event).values(
                    lease_id=lease_id, at=at, from_state=state.value, to_state=state.value, reason=reason,
                    extra=_jsonable(extra),
                )
            )
            event_id = res.inserted_primary_key[0]
        return LeaseEvent(lease_id, at, state, state, reason, dict(extra), int(event_id))

    def lease(self, lease_id: str) -> Lease:
        with self._read() as conn:
            r = conn.execute(select(_lease).where(_lease.c.id == lease_id)).first()
        if r is None:
            raise LeaseNotFound(f"no lease {lease_id!r}")
        return _row_to_lease(r)

    def leases(
        self,
        states: Iterable[LeaseState | str] | None = None,
        *,
        pool: str | None = None,
        node: str | None = None,
        gang: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[Lease]:
        """Leases, oldest first; ``states`` filters (e.g. ``LIVE_STATES``), ``since`` = touched since,
        ``gang`` = the leases launched together with that leader."""
        q = select(_lease)
        if states is not None:
            q = q.where(_lease.c.state.in_([LeaseState(s).value for s in states]))
        if pool is not None:
            q = q.where(_lease.c.pool == pool)
        if node is not None:
            q = q.where(_lease.c.node_name == node)
        if gang is not None:
            q = q.where(_lease.c.gang == gang)
        if since is not None:
            q = q.where(or_(_lease.c.state_since >= since, _lease.c.created_at >= since))
        q = q.order_by(_lease.c.created_at, _lease.c.id)
        if limit is not None:
            q = q.order_by(None).order_by(_lease.c.created_at.desc(), _lease.c.id.desc()).limit(limit)
        with self._read() as conn:
            rows = conn.execute(q).all()
        out = [_row_to_lease(r) for r in rows]
        return sorted(out, key=lambda x: (x.created_at, x.lease_id)) if limit is not None else out

    def lease_for_node(self, node_name: str) -> Lease | None:
        """The node's open lease (any state but TERMINATED/REFUSED), or None."""
        with self._read() as conn:
            r = conn.execute(select(_lease).where(_lease.c.open_node == node_name)).first()
        return _row_to_lease(r) if r is not None else None

    def events(
        self,
        lease_id: str | None = None,
        *,
        node: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[LeaseEvent]:
        """The event log, oldest first; ``limit`` keeps the newest ``limit`` lines."""
        q = select(_event)
        if lease_id is not None:
            q = q.where(_event.c.lease_id == lease_id)
        if node is not None:
            q = q.where(_event.c.lease_id.in_(select(_lease.c.id).where(_lease.c.node_name == node)))
        if since is not None:
            q = q.where(_event.c.at >= since)
        q = q.order_by(_event.c.at.desc(), _event.c.id.desc())
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [_row_to_event(r) for r in reversed(rows)]

