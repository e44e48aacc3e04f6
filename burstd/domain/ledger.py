"""The spend ledger: what a lease cost, split into intervals and charged to the jobs that held the node.

    from burstd.domain.ledger import Allocation, PricePoint, accrue

    intervals = accrue(lease, until=now,
                       prices=[PricePoint(at=t_change, price_per_hour_micros=455_000)],
                       allocations=[Allocation(job_id=1234, start=t_start, end=None, account="chem", user="ann")])
    # the Store runs it over its own records and writes the result in one transaction (advancing
    # lease.accrued_until, so the next accrual carries on from there): Store.accrue_spend(lease_id, now)

Pure: no clock, no I/O. Rules (ARCHITECTURE.md invariant 4):

- Spend runs from the provider's launch time (``lease.launched_at``) to its end (``lease.ended_at``, or
  ``until`` while the lease lives), at the price in force: ``lease.price_per_hour_micros`` until the first
  ``PricePoint``, then each point's price from its ``at`` on.
- The lease's cost up to time t is ``C(t) = round_half_even(exact integral of price over [launched_at, t])``
  in integer micro-dollars, computed with exact rationals. An interval [a, b) costs ``C(b) - C(a)``. So the
  intervals of a lease always sum to ``C(end)`` exactly, however the accrual is chunked (every cycle, after a
  crash, all at once): rounding never loses or invents a micro-dollar.
- Intervals break at price changes, at every job's allocation start and end, and at multiples of
  ``split_every_s`` (an hour by default, so every UTC day/week/month boundary is an interval boundary and
  period totals are exact). Within an interval the set of jobs on the node is constant: its cost is split
  between them by weight (CPUs, say) with the largest-remainder method; with no job it is overhead
  (boot, idle, drain), charged to the lease's account with ``job_id=None``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

from burstd.domain.budget import Allocation, PricePoint, SpendInterval
from burstd.domain.lease import Lease

HOUR = 3600
__all__ = ["Allocation", "PricePoint", "LedgerError", "accrue", "lease_cost", "split_largest_remainder"]


class LedgerError(ValueError):
    """Inputs the ledger cannot price (negative or non-finite price, a time that is not finite...)."""


def _finite(x: float, what: str) -> Fraction:
    if x is None or not math.isfinite(x):
        raise LedgerError(f"{what} must be a finite time, got {x!r}")
    return Fraction(x)


def _price(p: int, what: str) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or p < 0:
        raise LedgerError(f"{what} must be a non-negative integer of micro-dollars per hour, got {p!r}")
    return p


def _round_half_even(x: Fraction) -> int:
    return round(x)  # Fraction.__round__ rounds half to even, exactly


class _Schedule:
    """The exact cumulative cost C(t) of one lease under a price schedule."""

    def __init__(self, launched_at: float, base_price: int, prices: Iterable[PricePoint]):
        self.t0 = _finite(launched_at, "launched_at")
        base = _price(base_price, "the lease's price_per_hour_micros")
        points = sorted(prices, key=lambda p: p.at)
        # segments: (start, price) from t0 on; price changes before launch set the price at launch
        current = base
        segs: list[tuple[Fraction, int]] = []
        for p in points:
            at = _finite(p.at, "a price point's time")
            price = _price(p.price_per_hour_micros, f"the price at {p.at}")
            if at <= self.t0:
                current = price
            else:
                if not segs:
                    segs.append((self.t0, current))
                segs.append((at, price))
        if not segs:
            segs.append((self.t0, current))
        self.segs = segs
        # exact integral (micro-dollars) at the start of each segment
        acc = [Fraction(0)]
        for (s, price), (nxt, _) in zip(segs, segs[1:], strict=False):
            acc.append(acc[-1] + price * (nxt - s) / HOUR)
        self.acc = acc

    def index(self, t: Fraction) -> int:
        lo, hi = 0, len(self.segs) - 1
        while lo < hi:  # last segment whose start <= t
            mid = (lo + hi + 1) // 2
            if self.segs[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def price_at(self, t: Fraction) -> int:
        return self.segs[self.index(t)][1]

    def integral(self, t: Fraction) -> Fraction:
        if t <= self.t0:
            return Fraction(0)
        i = self.index(t)
        start, price = self.segs[i]
        return self.acc[i] + price * (t - start) / HOUR

    def cost(self, t: Fraction) -> int:
        return _round_half_even(self.integral(t))


def lease_cost(lease: Lease, until: float, prices: Iterable[PricePoint] = ()) -> int:
    """What the lease cost from launch to its end (or ``until`` while it lives), micro-dollars."""
    if lease.launched_at is None:
        return 0
    end = _end(lease, until)
    sched = _Schedule(lease.launched_at, lease.price_per_hour_micros, prices)
    return sched.cost(max(end, sched.t0))


def _end(lease: Lease, until: float) -> Fraction:
    end = _finite(until, "until")
    if lease.ended_at is not None:
        end = min(end, _finite(lease.ended_at, "ended_at"))
    return end


def split_largest_remainder(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights``: shares sum to ``total`` exactly; leftover units go to the
    largest fractional remainders (ties: earlier entries first)."""
    if total < 0 or not weights or any(w < 0 for w in weights) or sum(weights) == 0:
        raise LedgerError(f"cannot split {total} by weights {list(weights)}")
    wsum = sum(weights)
    shares = [total * w // wsum for w in weights]
    left = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % wsum), i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def accrue(
    lease: Lease,
    until: float,
    *,
    prices: Iterable[PricePoint] = (),
    allocations: Iterable[Allocation] = (),
    since: float | None = None,
    split_every_s: float | None = HOUR,
) -> list[SpendInterval]:
    """The lease's spend over [since, until) as intervals charged to jobs or overhead (see the module doc).

    ``since`` defaults to where the Store's record ends (``lease.accrued_until``), else the launch time.
    Returns [] when there is nothing to charge (never launched, or already accrued up to ``until``).
    """
    if lease.launched_at is None:
        return []
    sched = _Schedule(lease.launched_at, lease.price_per_hour_micros, prices)
    begin = sched.t0
    if since is not None:
        begin = max(begin, _finite(since, "since"))
    elif lease.accrued_until is not None:
        begin = max(begin, _finite(lease.accrued_until, "accrued_until"))
    end = _end(lease, until)
    if end <= begin:
        return []

    allocs: list[tuple[Fraction, Fraction | None, Allocation]] = []
    for alloc in allocations:
        if isinstance(alloc.weight, bool) or not isinstance(alloc.weight, int) or alloc.weight < 1:
            raise LedgerError(f"job {alloc.job_id}: allocation weight must be a positive integer, "
                              f"got {alloc.weight!r}")
        s = _finite(alloc.start, f"job {alloc.job_id} start")
        e = None if alloc.end is None else _finite(alloc.end, f"job {alloc.job_id} end")
        if e is not None and e <= s:
            continue
        allocs.append((s, e, alloc))

    cuts = {begin, end}
    cuts.update(s for s, _ in sched.segs[1:])
    for s, e, _ in allocs:
        cuts.add(s)
        if e is not None:
            cuts.add(e)
    if split_every_s:
        step = _finite(split_every_s, "split_every_s")
        if step <= 0:
            raise LedgerError(f"split_every_s must be positive, got {split_every_s!r}")
        k = math.floor(begin / step) + 1
        while k * step < end:
            cuts.add(k * step)
            k += 1
    points = sorted(c for c in cuts if begin <= c <= end)

    # sweep: the jobs on the node over [a, b) are those with start <= a < end (every start and end is a cut)
    by_start = sorted(range(len(allocs)), key=lambda i: allocs[i][0])
    by_end = sorted((e, i) for i, (_, e, _) in enumerate(allocs) if e is not None)  # (end, index)
    active: list[tuple[int, int]] = []  # (job_id, index), kept sorted: shares go out in job order
    si = ei = 0

    out: list[SpendInterval] = []
    prev_cost = sched.cost(points[0])
    for a, b in zip(points, points[1:], strict=False):
        while si < len(by_start) and allocs[by_start[si]][0] <= a:
            i = by_start[si]
            bisect.insort(active, (allocs[i][2].job_id, i))
            si += 1
        while ei < len(by_end) and by_end[ei][0] <= a:
            i = by_end[ei][1]
            active.remove((allocs[i][2].job_id, i))
            ei += 1
        cost_b = sched.cost(b)
        cost = cost_b - prev_cost
        prev_cost = cost_b
        price = sched.price_at(a)
        holders = [allocs[i][2] for _, i in active]
        fa, fb = float(a), float(b)
        if not holders:
            out.append(SpendInterval(lease.lease_id, lease.pool, lease.account, fa, fb, price, cost, None, None))
            continue
        shares = split_largest_remainder(cost, [al.weight for al in holders])
        for al, share in zip(holders, shares, strict=True):
            out.append(
                SpendInterval(lease.lease_id, lease.pool, al.account or lease.account, fa, fb, price, share,
                              al.job_id, al.user)
            )
    return out
