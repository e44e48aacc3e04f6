"""The spend ledger (invariant 4): attributed spend + overhead == lease cost, exactly, whatever happens."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.domain.lease import Lease, LeaseState
from burstd.domain.money import cost_micros
from burstd.domain.ledger import (
    Allocation,
    LedgerError,
    PricePoint,
    accrue,
    lease_cost,
    split_largest_remainder,
)
from tests.hypothesis_profiles import examples

T0 = 1_773_144_000.0  # 2026-03-10 12:00 UTC


def _lease(launched_at=T0, ended_at=None, price=1_000_000, account="chem", accrued_until=None) -> Lease:
    return Lease(lease_id="L1", pool="aws-a", node_name="n1", state=LeaseState.READY, price_per_hour_micros=price,
                 launched_at=launched_at, ended_at=ended_at, account=account, accrued_until=accrued_until)


def _exact_cost(launch: float, end: float, base: int, prices: list[PricePoint]) -> int:
    return round(_exact_integral(launch, end, base, prices))


def _exact_integral(launch: float, end: float, base: int, prices: list[PricePoint]) -> Fraction:
    """An independent reference: integrate the price piece by piece with Fractions."""
    pts = sorted(prices, key=lambda p: p.at)
    total = Fraction(0)
    t = Fraction(launch)
    stop = Fraction(end)
    price = base
    for p in pts:
        if Fraction(p.at) <= t:
            price = p.price_per_hour_micros
    for p in pts:
        at = Fraction(p.at)
        if at <= t:  # before launch, or two points at one time: the later one in the list wins
            price = p.price_per_hour_micros
            continue
        if at >= stop:
            break
        total += price * (at - t) / 3600
        t, price = at, p.price_per_hour_micros
    if stop > t:
        total += price * (stop - t) / 3600
    return total


# ---- examples -------------------------------------------------------------------------------------------


def test_one_job_for_the_whole_life_pays_everything():
    lease = _lease(ended_at=T0 + 5400)
    ivs = accrue(lease, T0 + 10_000, allocations=[Allocation(7, T0 - 10, T0 + 9_999, "chem", "ann")],
                 split_every_s=None)
    assert [(iv.job_id, iv.cost_micros, iv.user) for iv in ivs] == [(7, 1_500_000, "ann")]


def test_boot_and_idle_are_overhead_and_the_job_pays_its_window():
    lease = _lease(ended_at=T0 + 3600, price=3_600_000)  # $1 a second... no: $3.60/h = 1000 micros/s
    ivs = accrue(lease, T0 + 3600, allocations=[Allocation(7, T0 + 600, T0 + 1800, "bio", "bob")],
                 split_every_s=None)
    assert [(iv.start - T0, iv.end - T0, iv.job_id, iv.account, iv.cost_micros) for iv in ivs] == [
        (0, 600, None, "chem", 600_000),  # boot: the lease's account
        (600, 1800, 7, "bio", 1_200_000),  # the job: its own account
        (1800, 3600, None, "chem", 1_800_000),  # idle until suspend
    ]


def test_price_change_mid_life_is_applied_from_its_time():
    lease = _lease(ended_at=T0 + 7200, price=1_000_000)
    ivs = accrue(lease, T0 + 7200, prices=[PricePoint(T0 + 3600, 3_000_000)], split_every_s=None)
    assert [(iv.price_per_hour_micros, iv.cost_micros) for iv in ivs] == [(1_000_000, 1_000_000), (3_000_000, 3_000_000)]
    assert lease_cost(lease, T0 + 7200, [PricePoint(T0 + 3600, 3_000_000)]) == 4_000_000


def test_a_price_point_before_launch_sets_the_launch_price():
    lease = _lease(ended_at=T0 + 3600, price=1)
    assert lease_cost(lease, T0 + 3600, [PricePoint(T0 - 5, 2_000_000)]) == 2_000_000


def test_shared_node_split_by_weight_with_no_micro_lost():
    lease = _lease(ended_at=T0 + 1, price=3_600_000 * 10)  # 10_000 micros over one second
    ivs = accrue(lease, T0 + 1, allocations=[Allocation(1, T0, None, weight=1), Allocation(2, T0, None, weight=2)],
                 split_every_s=None)
    assert [(iv.job_id, iv.cost_micros) for iv in ivs] == [(1, 3333), (2, 6667)]


def test_intervals_break_at_hour_boundaries_so_periods_are_exact():
    launch = T0 - 1800  # 11:30
    lease = _lease(launched_at=launch, ended_at=launch + 3 * 3600)
    ivs = accrue(lease, launch + 10 * 3600)
    assert [iv.start % 3600 for iv in ivs[1:]] == [0, 0, 0]
    assert [iv.end - iv.start for iv in ivs] == [1800, 3600, 3600, 1800]


def test_accrual_resumes_from_what_the_store_recorded():
    lease = _lease(price=7_000_001)
    first = accrue(lease, T0 + 100.5, split_every_s=None)
    later = accrue(_lease(price=7_000_001, accrued_until=first[-1].end), T0 + 1000, split_every_s=None)
    assert later[0].start == T0 + 100.5
    assert sum(iv.cost_micros for iv in first + later) == lease_cost(lease, T0 + 1000)
    assert accrue(_lease(accrued_until=T0 + 1000), T0 + 1000) == []


def test_never_launched_costs_nothing():
    lease = Lease(lease_id="L", pool="p", node_name="n", state=LeaseState.REFUSED, price_per_hour_micros=10**9)
    assert accrue(lease, T0) == [] and lease_cost(lease, T0) == 0


def test_matches_money_cost_micros_on_whole_seconds():
    lease = _lease(price=1_234_567, ended_at=T0 + 4321)
    assert lease_cost(lease, T0 + 9999) == cost_micros(1_234_567, 4321)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"prices": [PricePoint(T0 + 1, -5)]}, "non-negative"),
        ({"prices": [PricePoint(float("nan"), 5)]}, "finite"),
        ({"allocations": [Allocation(1, T0, None, weight=0)]}, "weight"),
        ({"allocations": [Allocation(1, float("inf"), None)]}, "finite"),
        ({"split_every_s": -1.0}, "positive"),
    ],
)
def test_bad_inputs_are_named(kwargs, match):
    with pytest.raises(LedgerError, match=match):
        accrue(_lease(), T0 + 100, **kwargs)


def test_split_largest_remainder_examples():
    assert split_largest_remainder(10, [1, 1, 1]) == [4, 3, 3]
    assert split_largest_remainder(0, [5, 1]) == [0, 0]
    assert split_largest_remainder(7, [0, 1]) == [0, 7]
    with pytest.raises(LedgerError):
        split_largest_remainder(5, [0, 0])


# ---- properties -----------------------------------------------------------------------------------------

times = st.floats(min_value=-50_000, max_value=200_000, allow_nan=False, allow_infinity=False)
prices = st.integers(min_value=0, max_value=50_000_000_000)


@st.composite
def scenarios(draw):
    launch = T0 + draw(st.floats(min_value=0, max_value=10_000, allow_nan=False))
    life = draw(st.one_of(st.floats(min_value=0, max_value=300_000, allow_nan=False),
                          st.integers(min_value=0, max_value=300_000).map(float)))
    ended = draw(st.booleans())
    base = draw(prices)
    pts = [PricePoint(T0 + draw(times), draw(prices)) for _ in range(draw(st.integers(0, 6)))]
    allocs = []
    for j in range(draw(st.integers(0, 6))):
        s = T0 + draw(times)
        e = None if draw(st.booleans()) and j % 3 == 0 else s + draw(st.floats(min_value=-10, max_value=100_000))
        allocs.append(Allocation(100 + j, s, e, draw(st.sampled_from(["chem", "bio", ""])),
                                 draw(st.sampled_from(["ann", "bob", None])), draw(st.integers(1, 64))))
    until = launch + life + (draw(st.floats(min_value=0, max_value=5_000)) if ended else 0)
    lease = _lease(launched_at=launch, ended_at=launch + life if ended else None, price=base)
    split = draw(st.sampled_from([None, 3600.0, 900.0, 7.5 if life < 3000 else 3600.0]))
    cuts = sorted(draw(st.lists(st.floats(min_value=launch, max_value=max(launch, until)), max_size=5)))
    return lease, until, pts, allocs, split, cuts


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_attributed_plus_overhead_equals_lease_cost_exactly(sc):
    lease, until, pts, allocs, split, _ = sc
    ivs = accrue(lease, until, prices=pts, allocations=allocs, split_every_s=split)
    total = lease_cost(lease, until, pts)
    end = min(until, lease.ended_at) if lease.ended_at is not None else until
    assert total == _exact_cost(lease.launched_at, end, lease.price_per_hour_micros, pts)
    assert sum(iv.cost_micros for iv in ivs) == total
    assert all(iv.cost_micros >= 0 for iv in ivs)
    # the intervals tile [launch, end) with no gap and no overlap (jobs sharing a piece repeat its bounds)
    spans = sorted({(iv.start, iv.end) for iv in ivs})
    if end > lease.launched_at:
        assert spans[0][0] == lease.launched_at and spans[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    else:
        assert ivs == []
    # each piece costs its exact integral, rounded at both ends: at most one micro-dollar off
    sched_pts = sorted(pts, key=lambda p: p.at)
    for a, b in spans:
        exact = (_exact_integral(lease.launched_at, b, lease.price_per_hour_micros, sched_pts)
                 - _exact_integral(lease.launched_at, a, lease.price_per_hour_micros, sched_pts))
        got = sum(iv.cost_micros for iv in ivs if (iv.start, iv.end) == (a, b))
        assert abs(got - exact) <= 1
    # a job is charged only inside its allocation window; overhead only where no job held the node
    by_job = {a.job_id: a for a in allocs}
    for iv in ivs:
        if iv.job_id is not None:
            a = by_job[iv.job_id]
            assert a.start <= iv.start and (a.end is None or iv.end <= a.end)
        else:
            assert not any(a.start <= iv.start and (a.end is None or a.end >= iv.end) and
                           (a.end is None or a.end > a.start) for a in allocs)


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_chunked_accrual_sums_to_the_same_cost(sc):
    """The daemon accrues every cycle and after restarts: chunking never changes the total by a micro-dollar."""
    lease, until, pts, allocs, split, cuts = sc
    whole = accrue(lease, until, prices=pts, allocations=allocs, split_every_s=split)
    got = []
    accrued = None
    for c in [*cuts, until]:
        chunk = accrue(
            Lease(**{**{f: getattr(lease, f) for f in lease.__slots__}, "accrued_until": accrued}),
            c, prices=pts, allocations=allocs, split_every_s=split,
        )
        if chunk:
            assert accrued is None or chunk[0].start == accrued
            accrued = chunk[-1].end
        got += chunk
    assert sum(iv.cost_micros for iv in got) == sum(iv.cost_micros for iv in whole) == lease_cost(lease, until, pts)
    for job in {a.job_id for a in allocs}:
        # per job the totals can differ by rounding at chunk edges, never by more than one unit per chunk edge
        a = sum(iv.cost_micros for iv in got if iv.job_id == job)
        b = sum(iv.cost_micros for iv in whole if iv.job_id == job)
        assert abs(a - b) <= len(cuts) + 1


@settings(max_examples=examples(1000), deadline=None)
@given(st.integers(0, 10**15), st.lists(st.integers(0, 10**6), min_size=1, max_size=20).filter(lambda w: sum(w) > 0))
def test_largest_remainder_is_exact_and_fair(total, weights):
    shares = split_largest_remainder(total, weights)
    assert sum(shares) == total
    wsum = sum(weights)
    for s, w in zip(shares, weights, strict=True):
        assert abs(Fraction(s) - Fraction(total * w, wsum)) < 1
