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
    store.accrue_spend(lease_id, now)        # ledger.accrue over the stored prices and allocations, recorded
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
  ``burstd.policy.ledger`` splits intervals at hour boundaries, so every day/week/month total is exact.

The same code runs on SQLite and PostgreSQL (``postgresql+psycopg2://...``).
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Engine, and_, create_engine, event, func, insert, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import StaticPool

from burstd.config import _NAME as _ACCOUNT_RE  # the config file's rule for names
from burstd.db.models import AllocationRow, BudgetRow, CooldownRow, LeaseEventRow, LeaseRow, SettingRow, SpendIntervalRow
from burstd.domain.budget import (
    NO_ACCOUNT,
    PERIODS,
    SITE,
    AccountBudget,
    Allocation,
    BudgetBook,
    PricePoint,
    SpendInterval,
    budget_key,
    period_bounds,
)
from burstd.domain.lease import FINAL_STATES, Lease, LeaseEvent, LeaseState, check_transition
from burstd.domain.money import MICROS_PER_USD

MIGRATIONS = Path(__file__).resolve().with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 30_000
_MIGRATE_LOCK_KEY = 0x6275727374  # "burst": PostgreSQL advisory lock held while migrating

_lease = LeaseRow.__table__
_event = LeaseEventRow.__table__
_budget = BudgetRow.__table__
_spend = SpendIntervalRow.__table__
_setting = SettingRow.__table__
_cooldown = CooldownRow.__table__
_alloc = AllocationRow.__table__

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
SPEND_GROUPS = ("account", "user", "job", "pool", "lease")
OVERHEAD = "(overhead)"


class StoreError(Exception):
    """Base class of the Store's errors; the message says what happened and to which lease/account."""


class LeaseNotFound(StoreError, LookupError):
    pass


class StaleLease(StoreError):
    """The lease is not in the state the caller expected (another writer moved it first). Nothing was written."""

    def __init__(self, lease_id: str, expected: Iterable[LeaseState], actual: LeaseState):
        self.lease_id, self.expected, self.actual = lease_id, tuple(expected), actual
        super().__init__(
            f"lease {lease_id} is {actual}, not {' or '.join(sorted(self.expected))}: "
            "another writer moved it first; re-read it and decide again"
        )


class NodeBusy(StoreError):
    """The node already has an open lease; a node can back at most one VM at a time."""

    def __init__(self, node_name: str, lease: Lease | None):
        self.node_name, self.lease = node_name, lease
        held = f"lease {lease.lease_id} ({lease.state})" if lease else "another lease"
        super().__init__(f"node {node_name} already has an open lease: {held}; close it before leasing the node again")


class BudgetError(StoreError, ValueError):
    """A budget that cannot be stored (negative, not a number, unknown period...). Nothing was written."""


class SpendConflict(StoreError):
    """Spend that overlaps what is already recorded for a lease (a retry after a crash). Nothing was written."""


@dataclass(frozen=True, slots=True)
class BudgetEntry:
    account: str  # SITE ("*") for the site-wide budget
    period: str
    limit_micros: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class Cooldown:
    offering: str
    until: float
    reason: str


def _now(at: float | None) -> float:
    return time.time() if at is None else float(at)


def _row_to_lease(r: Any) -> Lease:
    return Lease(
        lease_id=r.id,
        pool=r.pool,
        node_name=r.node_name,
        state=LeaseState(r.state),
        market=r.market,
        instance_id=r.instance_id,
        price_per_hour_micros=int(r.price_per_hour_micros),
        created_at=r.created_at,
        launched_at=r.launched_at,
        ready_at=r.ready_at,
        ended_at=r.ended_at,
        state_since=r.state_since,
        job_ids=tuple(int(j) for j in (r.job_ids or ())),
        account=r.account,
        reason=r.reason,
        offering=r.offering,
        attempt=int(r.attempt),
        accrued_until=r.accrued_until,
        gang=getattr(r, "gang", None),
    )


def _row_to_event(r: Any) -> LeaseEvent:
    return LeaseEvent(
        lease_id=r.lease_id,
        at=r.at,
        from_state=LeaseState(r.from_state) if r.from_state else None,
        to_state=LeaseState(r.to_state),
        reason=r.reason,
        extra=dict(r.extra or {}),
        event_id=int(r.id),
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


def _budget_micros(usd: Any, what: str) -> int:
    """USD (str, Decimal, int or float) to micro-dollars. A float is a binary approximation anyway, so it is
    rounded half-even to the micro-dollar; a string or Decimal finer than a micro-dollar is refused."""
    if isinstance(usd, bool):
        raise BudgetError(f"budget for {what} must be an amount in USD, got {usd!r}")
    try:
        value = Decimal(str(usd).strip().removeprefix("$").replace(",", ""))
    except (InvalidOperation, ValueError):
        raise BudgetError(f"budget for {what} must be an amount in USD, got {usd!r}") from None
    if not value.is_finite():
        raise BudgetError(f"budget for {what} must be a finite amount, got {usd!r}")
    if value < 0:
        raise BudgetError(f"budget for {what} cannot be negative, got {usd!r}")
    micros = value * MICROS_PER_USD
    if isinstance(usd, float):
        micros = micros.to_integral_value(rounding=ROUND_HALF_EVEN)
    if micros != micros.to_integral_value():
        raise BudgetError(f"budget for {what} has more precision than a micro-dollar: {usd!r}")
    if micros >= 2**62:
        raise BudgetError(f"budget for {what} is too large: {usd!r}")
    return int(micros)


def _valid_account(account: str) -> str:
    if account in (SITE, NO_ACCOUNT) or (isinstance(account, str) and re.fullmatch(_ACCOUNT_RE, account)
                                         and len(account) <= 64):
        return account
    raise BudgetError(f"not a valid account name: {account!r} (letters, digits, '_', '.', '-'; or {SITE!r} for the site)")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_begin)
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys = ON")
    mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode and mode[0].lower() not in ("wal", "memory"):
        raise StoreError(f"SQLite would not switch to WAL mode (got {mode[0]!r}); is the file on a network share?")
    cur.execute("PRAGMA synchronous = FULL")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("burstd_write") else "BEGIN")


def make_engine(url: str) -> Engine:
    """An engine set up the way burstd needs it (SQLite: WAL, busy timeout, foreign keys, folder created)."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        kwargs: dict[str, Any] = {}
        if u.database in (None, "", ":memory:"):
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        else:
            Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs = {"connect_args": {"check_same_thread": False}}
        engine = create_engine(u, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(u, pool_pre_ping=True)


def migrate(engine: Engine) -> str:
    """Run the packaged Alembic migrations to head, under a lock so two processes never race. Returns head."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from alembic.runtime.migration import MigrationContext

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.execution_options(burstd_write=True).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK_KEY})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        return MigrationContext.configure(conn).get_current_revision() or ""


class Store:
    """burstd's durable state. Thread-safe (one engine, a connection per call); open once per process."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._w = engine.execution_options(burstd_write=True)

    @classmethod
    def open(cls, url: str, *, migrate_to_head: bool = True) -> Store:
        engine = make_engine(url)
        if migrate_to_head:
            migrate(engine)
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self._w.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self.engine.connect() as conn:
            yield conn

    def _upsert(self, conn: Any, table: Any, keys: list[str], values: dict[str, Any]) -> None:
        if conn.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        else:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        stmt = dialect_insert(table).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=keys, set_={k: v for k, v in values.items() if k not in keys}
        )
        conn.execute(stmt)

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
        **fields: Any,
    ) -> Lease:
        """Move a lease to ``target`` (checked against the state machine) and record the event, atomically.

        ``expect``: the state(s) the caller believes the lease is in; anything else raises ``StaleLease``.
        ``fields``: lease columns to set in the same write (``LEASE_FIELDS``). Unless given: READY sets
        ``ready_at``; FAILED, REFUSED and TERMINATED set ``ended_at`` (where spend stops) to ``at``, except
        FAILED -> TERMINATED (nothing to terminate), which keeps the failure time; FAILED -> TERMINATING clears
        it (the instance found lives until TERMINATED). ``launched_at`` (the provider's launch time, where
        spend starts) is the caller's to give; pass the provider's termination time as ``ended_at`` when known.
        """
        target = LeaseState(target)
        values = _check_fields(fields)
        at = _now(at)
        expected = None
        if expect is not None:
            expected = {LeaseState(expect)} if isinstance(expect, str) else {LeaseState(e) for e in expect}
        with self._write() as conn:
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
                    extra=_jsonable({**values, **(extra or {})}),
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

    def _state_in(self, conn: Any, lease_id: str) -> LeaseState:
        state = conn.execute(select(_lease.c.state).where(_lease.c.id == lease_id)).scalar()
        if state is None:
            raise LeaseNotFound(f"no lease {lease_id!r}")
        return LeaseState(state)

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

    # ---- what the ledger needs: who held the node, at what price -------------------------------------------

    def record_allocations(self, lease_id: str, allocations: Iterable[Allocation]) -> int:
        """Remember which jobs held the lease's node (from each cycle's Slurm snapshot), so spend can be
        attributed after the jobs are gone and across daemon restarts. Keyed by (lease, job, start): seeing
        a job again updates its end, account, user and weight. Returns the number of rows written."""
        rows = []
        for a in allocations:
            if isinstance(a.weight, bool) or not isinstance(a.weight, int) or a.weight < 1:
                raise ValueError(f"job {a.job_id}: allocation weight must be a positive integer, got {a.weight!r}")
            start = float(a.start)
            end = None if a.end is None else float(a.end)
            if not math.isfinite(start) or (end is not None and not math.isfinite(end)):
                raise ValueError(f"job {a.job_id}: allocation times must be finite, got {a.start!r}..{a.end!r}")
            rows.append(dict(lease_id=lease_id, job_id=int(a.job_id), start=start, end=end, account=a.account,
                             user=a.user, weight=a.weight))
        if not rows:
            return 0
        with self._write() as conn:
            self._state_in(conn, lease_id)
            for r in rows:
                self._upsert(conn, _alloc, ["lease_id", "job_id", "start"], r)
        return len(rows)

    def close_allocations(self, lease_id: str, at: float, *, still_running: Iterable[int] = ()) -> int:
        """End, at ``at``, every open allocation of the lease whose job is not in ``still_running`` (jobs that
        left the node between two snapshots). Returns how many were closed."""
        keep = [int(j) for j in still_running]
        at = float(at)
        with self._write() as conn:
            self._state_in(conn, lease_id)
            q = update(_alloc).where(and_(_alloc.c.lease_id == lease_id, _alloc.c.end.is_(None),
                                          _alloc.c.start <= at))
            if keep:
                q = q.where(_alloc.c.job_id.not_in(keep))
            return conn.execute(q.values(end=at)).rowcount

    def allocations(self, lease_id: str) -> list[Allocation]:
        with self._read() as conn:
            return self._allocations_in(conn, lease_id)

    @staticmethod
    def _allocations_in(conn: Any, lease_id: str) -> list[Allocation]:
        q = select(_alloc).where(_alloc.c.lease_id == lease_id).order_by(_alloc.c.start, _alloc.c.job_id)
        return [Allocation(int(r.job_id), r.start, r.end, r.account, r.user, int(r.weight))
                for r in conn.execute(q).all()]

    def price_points(self, lease_id: str) -> list[PricePoint]:
        """The lease's price history, from its event log: the price at creation, then every change recorded
        with ``update(lease_id, reason, price_per_hour_micros=..., at=...)`` (or a transition that set it)."""
        with self._read() as conn:
            return self._price_points_in(conn, lease_id)

    @staticmethod
    def _price_points_in(conn: Any, lease_id: str) -> list[PricePoint]:
        rows = conn.execute(
            select(_event.c.at, _event.c.extra).where(_event.c.lease_id == lease_id).order_by(_event.c.id)
        ).all()
        return [
            PricePoint(r.at, int(r.extra["price_per_hour_micros"]))
            for r in rows
            if r.extra and r.extra.get("price_per_hour_micros") is not None
        ]

    # ---- budgets -----------------------------------------------------------------------------------------

    def set_budget(self, account: str, usd: Any, *, period: str = "month", at: float | None = None) -> BudgetEntry:
        """Set ``account``'s limit (USD, as str/Decimal/number) for ``period``; ``SITE`` for the site cap.
        Negative, NaN, infinite or sub-micro-dollar amounts raise ``BudgetError`` and write nothing."""
        account = _valid_account(account)
        if period not in PERIODS:
            raise BudgetError(f"unknown budget period {period!r}; use one of: {', '.join(PERIODS)}")
        micros = _budget_micros(usd, "the site" if account == SITE else f"account {account}")
        at = _now(at)
        with self._write() as conn:
            self._upsert(conn, _budget, ["account", "period"],
                         dict(account=account, period=period, limit_micros=micros, updated_at=at))
        return BudgetEntry(account, period, micros, at)

    def clear_budget(self, account: str, *, period: str = "month") -> bool:
        """Remove a stored budget (the config's value applies again). True if there was one."""
        with self._write() as conn:
            res = conn.execute(_budget.delete().where(and_(_budget.c.account == account, _budget.c.period == period)))
        return res.rowcount > 0

    def budgets(self, period: str | None = None) -> list[BudgetEntry]:
        q = select(_budget).order_by(_budget.c.account, _budget.c.period)
        if period is not None:
            q = q.where(_budget.c.period == period)
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [BudgetEntry(r.account, r.period, int(r.limit_micros), r.updated_at) for r in rows]

    def budget_book(self, period: str | None, now: float, config: Any = None) -> BudgetBook:
        """Limits and recorded spend for the period holding ``now``.

        ``config``: a ``burstd.config.Config`` or its ``BudgetConfig`` (or None). Its per-account and site
        budgets apply where the database has none; ``default_account_usd`` is *not* applied here (an account
        without a budget has ``limit_micros=None``: the policy decides what that means).
        """
        bcfg = getattr(config, "budget", config)
        period = period or getattr(bcfg, "period", None) or "month"
        start, end = period_bounds(period, now)
        limits: dict[str, int | None] = {}
        site_limit: int | None = None
        if bcfg is not None:
            for account, usd in (getattr(bcfg, "accounts", None) or {}).items():
                limits[account] = _budget_micros(usd, f"account {account}")
            if getattr(bcfg, "site_usd", None) is not None:
                site_limit = _budget_micros(bcfg.site_usd, "the site")
        for b in self.budgets(period):
            if b.account == SITE:
                site_limit = b.limit_micros
            else:
                limits[b.account] = b.limit_micros
        spent: dict[str, int] = {}
        for a, v in self.spend(by="account", since=start, until=end).items():  # no account: under NO_ACCOUNT
            spent[budget_key(a)] = spent.get(budget_key(a), 0) + v
        accounts = {
            a: AccountBudget(a, limits.get(a), spent.get(a, 0)) for a in sorted(set(limits) | set(spent))
        }
        burn = getattr(bcfg, "burn_rate_usd_per_hour", None)
        return BudgetBook(
            period_start=start,
            period_end=end,
            site_limit_micros=site_limit,
            site_spent_micros=sum(spent.values()),
            burn_rate_cap_micros_per_hour=_budget_micros(burn, "the burn rate") if burn is not None else None,
            accounts=accounts,
        )

    # ---- spend -------------------------------------------------------------------------------------------

    def add_spend(self, intervals: Iterable[SpendInterval]) -> int:
        """Record ledger intervals in one transaction and advance each lease's ``accrued_until``.

        Intervals of one lease must start at or after what is already recorded for it (a retry after a crash
        that already wrote them raises ``SpendConflict`` and writes nothing). Returns the number written.
        """
        items = list(intervals)
        if not items:
            return 0
        with self._write() as conn:
            self._add_spend_in(conn, items)
        return len(items)

    def _add_spend_in(self, conn: Any, items: list[SpendInterval]) -> None:
        by_lease: dict[str, list[SpendInterval]] = {}
        for iv in items:
            if iv.cost_micros < 0 or iv.price_per_hour_micros < 0 or not iv.end >= iv.start:
                raise ValueError(f"bad spend interval for lease {iv.lease_id}: {iv}")
            by_lease.setdefault(iv.lease_id, []).append(iv)
        for lease_id, ivs in by_lease.items():
            first = min(iv.start for iv in ivs)
            last = max(iv.end for iv in ivs)
            cur = conn.execute(select(_lease.c.accrued_until).where(_lease.c.id == lease_id)).first()
            if cur is None:
                raise LeaseNotFound(f"spend for unknown lease {lease_id!r}")
            prev = cur.accrued_until
            if prev is not None and first < prev:
                raise SpendConflict(
                    f"lease {lease_id}: spend from {first} overlaps what is recorded (up to {prev}); nothing written"
                )
            cond = _lease.c.accrued_until.is_(None) if prev is None else _lease.c.accrued_until == prev
            res = conn.execute(update(_lease).where(and_(_lease.c.id == lease_id, cond)).values(accrued_until=last))
            if res.rowcount != 1:
                raise SpendConflict(f"lease {lease_id}: another writer recorded spend at the same time")
        conn.execute(
            insert(_spend),
            [
                dict(lease_id=iv.lease_id, pool=iv.pool, account=iv.account, user=iv.user, job_id=iv.job_id,
                     start=iv.start, end=iv.end, price_per_hour_micros=iv.price_per_hour_micros,
                     cost_micros=iv.cost_micros)
                for iv in items
            ],
        )

    def accrue_spend(self, lease_id: str, until: float, *, split_every_s: float | None = 3600.0) -> list[SpendInterval]:
        """Bring one lease's recorded spend up to ``until`` (or its end), in one transaction: read the lease,
        its price history and its job allocations, run ``burstd.policy.ledger.accrue`` and record the result.
        Safe to call every cycle, after a crash, and from two processes (one of them records, the other
        finds nothing left to do). Returns the intervals written (possibly none)."""
        from burstd.policy.ledger import accrue  # pure; imported here to keep the Store importable on its own

        with self._write() as conn:
            # FOR UPDATE: a second accruer on PostgreSQL waits here, then sees the advanced accrued_until
            # (SQLite's BEGIN IMMEDIATE already serialises writers)
            cur = conn.execute(select(_lease).where(_lease.c.id == lease_id).with_for_update()).first()
            if cur is None:
                raise LeaseNotFound(f"no lease {lease_id!r}")
            lease = _row_to_lease(cur)
            items = accrue(
                lease,
                until,
                prices=self._price_points_in(conn, lease_id),
                allocations=self._allocations_in(conn, lease_id),
                split_every_s=split_every_s,
            )
            if items:
                self._add_spend_in(conn, items)
        return items

    def _spend_key(self, by: str) -> Any:
        if by not in SPEND_GROUPS:
            raise ValueError(f"cannot group spend by {by!r}; use one of: {', '.join(SPEND_GROUPS)}")
        return {"account": _spend.c.account, "user": _spend.c.user, "job": _spend.c.job_id, "pool": _spend.c.pool,
                "lease": _spend.c.lease_id}[by]

    @staticmethod
    def _range(q: Any, since: float | None, until: float | None) -> Any:
        if since is not None:
            q = q.where(_spend.c.start >= since)
        if until is not None:
            q = q.where(_spend.c.start < until)
        return q

    def spend(self, by: str = "account", since: float | None = None, until: float | None = None) -> dict[str, int]:
        """Recorded spend in micro-dollars grouped by account, user, job, pool or lease, for intervals starting
        in [since, until). Overhead (no job) is keyed ``"(overhead)"`` when grouping by user or job."""
        key = self._spend_key(by)
        q = self._range(select(key.label("k"), func.sum(_spend.c.cost_micros).label("c")).group_by(key), since, until)
        with self._read() as conn:
            rows = conn.execute(q).all()
        out = {(OVERHEAD if r.k is None else str(r.k)): int(r.c) for r in rows}
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def spend_intervals(
        self, lease_id: str | None = None, since: float | None = None, until: float | None = None
    ) -> list[SpendInterval]:
        q = self._range(select(_spend), since, until)
        if lease_id is not None:
            q = q.where(_spend.c.lease_id == lease_id)
        with self._read() as conn:
            rows = conn.execute(q.order_by(_spend.c.start, _spend.c.id)).all()
        return [
            SpendInterval(r.lease_id, r.pool, r.account, r.start, r.end, int(r.price_per_hour_micros),
                          int(r.cost_micros), None if r.job_id is None else int(r.job_id), r.user)
            for r in rows
        ]

    def spend_series(
        self, by: str = "account", since: float | None = None, until: float | None = None
    ) -> list[tuple[float, str, int]]:
        """(interval start, key, micro-dollars) sorted by time: the raw material of the spend plot."""
        key = self._spend_key(by)
        q = self._range(
            select(_spend.c.start, key.label("k"), func.sum(_spend.c.cost_micros).label("c")).group_by(
                _spend.c.start, key
            ),
            since,
            until,
        ).order_by(_spend.c.start)
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [(r.start, OVERHEAD if r.k is None else str(r.k), int(r.c)) for r in rows]

    # ---- settings and cooldowns --------------------------------------------------------------------------

    def get_setting(self, key: str, default: str | None = None) -> str | None:
        with self._read() as conn:
            v = conn.execute(select(_setting.c.value).where(_setting.c.key == key)).scalar()
        return default if v is None else v

    def set_setting(self, key: str, value: str, *, at: float | None = None) -> None:
        if not isinstance(value, str):
            raise TypeError(f"setting {key!r}: values are strings, got {type(value).__name__}")
        with self._write() as conn:
            self._upsert(conn, _setting, ["key"], dict(key=key, value=value, updated_at=_now(at)))

    def settings(self) -> dict[str, str]:
        with self._read() as conn:
            return {r.key: r.value for r in conn.execute(select(_setting).order_by(_setting.c.key))}

    def set_cooldown(self, offering: str, until: float, reason: str = "", *, at: float | None = None) -> None:
        with self._write() as conn:
            self._upsert(conn, _cooldown, ["offering"],
                         dict(offering=offering, until=float(until), reason=reason, updated_at=_now(at)))

    def cooldowns(self, now: float | None = None) -> dict[str, Cooldown]:
        """Offerings cooling down at ``now`` (expired ones are left out; ``prune_cooldowns`` deletes them)."""
        now = _now(now)
        with self._read() as conn:
            rows = conn.execute(select(_cooldown).where(_cooldown.c.until > now)).all()
        return {r.offering: Cooldown(r.offering, r.until, r.reason) for r in rows}

    def prune_cooldowns(self, now: float | None = None) -> int:
        with self._write() as conn:
            return conn.execute(_cooldown.delete().where(_cooldown.c.until <= _now(now))).rowcount
