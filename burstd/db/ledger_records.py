"""The Store's money records: who held a node (allocations), at what price (price points), budgets, and the spend
ledger's intervals. Money is integer micro-dollars; a spend interval counts in the period holding its ``start``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from sqlalchemy import and_, func, insert, select, update

from burstd.config import _NAME as _ACCOUNT_RE  # the config file's rule for names
from burstd.db.engine import StoreBase, _now
from burstd.domain.store_errors import BudgetError, LeaseNotFound, SpendConflict
from burstd.db.leadership import Fence, check_fence_in
from burstd.db.rows import _alloc, _budget, _data_spend, _event, _lease, _row_to_lease, _spend
from burstd.domain.budget import (
    NO_ACCOUNT, PERIODS, SITE, AccountBudget, Allocation, BudgetBook, PricePoint, SpendInterval, budget_key,
    period_bounds,
)
from burstd.domain.data import DataSpend
from burstd.domain.money import DATA_SPEND_KINDS, MICROS_PER_USD

SPEND_GROUPS = ("account", "user", "job", "pool", "lease", "kind")
OVERHEAD = "(overhead)"
DATA = "(data)"  # a data cost grouped by lease: it belongs to no lease


@dataclass(frozen=True, slots=True)
class BudgetEntry:
    account: str  # SITE ("*") for the site-wide budget
    period: str
    limit_micros: int
    updated_at: float



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
    raise BudgetError(f"not a valid account name: {account!r} (letters, digits, '_', '.', '-'; or {SITE!r} for the "
                      f"site, {NO_ACCOUNT!r} for jobs without an account)")




class LedgerRecords(StoreBase):
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
        """Record ledger intervals in one transaction and advance each lease's ``accrued_until``: intervals made
        elsewhere (an import, a test, the store benchmark). The daemon never calls it: it accrues with
        ``accrue_spend``, which computes and records in one transaction.

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

    def accrue_spend(self, lease_id: str, until: float, *, split_every_s: float | None = 3600.0,
                     fence: Fence | None = None) -> list[SpendInterval]:
        """Bring one lease's recorded spend up to ``until`` (or its end), in one transaction: read the lease,
        its price history and its job allocations, run ``burstd.domain.ledger.accrue`` and record the result.
        Safe to call every cycle, after a crash, and from two processes (one of them records, the other
        finds nothing left to do). ``fence``: the leader's token, checked first in the same transaction (a
        deposed leader's accrual raises ``Fenced`` and writes nothing). Returns the intervals written (possibly
        none). This is the daemon's only way to write spend (``daemon.spend``)."""
        from burstd.domain.ledger import accrue  # pure; imported here to keep the Store importable on its own

        with self._write() as conn:
            if fence is not None:
                check_fence_in(conn, fence)
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
                "lease": _spend.c.lease_id, "kind": None}[by]  # None: one group (named in Python, not SQL)

    @staticmethod
    def _data_key(by: str) -> Any:
        d = _data_spend.c
        return {"account": d.account, "user": d.user, "job": d.job_id, "pool": d.pool, "lease": None,
                "kind": d.kind}[by]

    @staticmethod
    def _data_range(q: Any, since: float | None, until: float | None) -> Any:
        if since is not None:
            q = q.where(_data_spend.c.at >= since)
        if until is not None:
            q = q.where(_data_spend.c.at < until)
        return q

    # ---- data spend (issue 24): transfers and storage, booked to the job's account like compute -------------

    def book_data_spend(self, item: DataSpend, *, fence: Fence | None = None) -> bool:
        """Book one data cost; False if its ``key`` is booked already (the transfer engine may retry freely).
        ``fence``: the leader's token, checked in the same transaction."""
        if item.kind not in DATA_SPEND_KINDS:
            raise ValueError(f"data spend kind {item.kind!r}: use one of {', '.join(DATA_SPEND_KINDS)}")
        if item.cost_micros < 0 or item.n_bytes < 0 or not math.isfinite(item.at):
            raise ValueError(f"bad data spend {item}")
        if not item.key or len(item.key) > 128:
            raise ValueError(f"data spend key must be 1..128 characters, got {item.key!r}")
        _valid_account(item.account)
        with self._write() as conn:
            if fence is not None:
                check_fence_in(conn, fence)
            if conn.execute(select(_data_spend.c.id).where(_data_spend.c.key == item.key)).first() is not None:
                return False
            conn.execute(insert(_data_spend).values(
                key=item.key, kind=item.kind, pool=item.pool, account=item.account, user=item.user,
                job_id=item.job_id, n_bytes=item.n_bytes, at=item.at, cost_micros=item.cost_micros))
        return True

    def data_spend(self, since: float | None = None, until: float | None = None) -> list[DataSpend]:
        q = self._data_range(select(_data_spend), since, until).order_by(_data_spend.c.at, _data_spend.c.id)
        with self._read() as conn:
            rows = conn.execute(q).all()
        return [DataSpend(r.key, r.kind, r.pool, r.account, int(r.n_bytes), r.at, int(r.cost_micros),
                          None if r.job_id is None else int(r.job_id), r.user) for r in rows]

    @staticmethod
    def _range(q: Any, since: float | None, until: float | None) -> Any:
        if since is not None:
            q = q.where(_spend.c.start >= since)
        if until is not None:
            q = q.where(_spend.c.start < until)
        return q

    def spend(self, by: str = "account", since: float | None = None, until: float | None = None) -> dict[str, int]:
        """Recorded spend in micro-dollars grouped by account, user, job, pool, lease or kind (compute,
        transfer_in, transfer_out, storage), for intervals starting (data costs booked) in [since, until).
        Overhead (no job) is keyed ``"(overhead)"`` when grouping by user or job; data by lease is ``"(data)"``."""
        out: dict[str, int] = {}
        with self._read() as conn:
            for key, cost, rng, one in ((self._spend_key(by), _spend.c.cost_micros, self._range, "compute"),
                                        (self._data_key(by), _data_spend.c.cost_micros, self._data_range, DATA)):
                total = func.sum(cost).label("c")
                q = select(total) if key is None else select(key.label("k"), total).group_by(key)
                for r in conn.execute(rng(q, since, until)).all():
                    if r.c is None:  # an empty table's sum
                        continue
                    k = one if key is None else OVERHEAD if r.k is None else str(r.k)
                    out[k] = out.get(k, 0) + int(r.c)
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
        key, dkey = self._spend_key(by), self._data_key(by)
        total = func.sum(_spend.c.cost_micros).label("c")
        q = self._range(select(_spend.c.start, total).group_by(_spend.c.start) if key is None else
                        select(_spend.c.start, key.label("k"), total).group_by(_spend.c.start, key), since, until)
        d = _data_spend.c
        dq = self._data_range(select(d.at.label("start"), d.cost_micros.label("c"))
                              if dkey is None else select(d.at.label("start"), dkey.label("k"), d.cost_micros.label("c")),
                              since, until)
        out: list[tuple[float, str, int]] = []
        with self._read() as conn:
            for query, one, grouped in ((q, "compute", key is not None), (dq, DATA, dkey is not None)):
                for r in conn.execute(query).all():
                    k = (OVERHEAD if r.k is None else str(r.k)) if grouped else one
                    out.append((r.start, k, int(r.c)))
        return sorted(out, key=lambda p: p[0])

