from __future__ import annotations

import pytest

from burstd.providers.base import Offering
from burstd.providers.offerings import OfferingCooldown, PoolProtection


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


A = Offering("m5.large", "us-east-1a", "spot")
B = Offering("m5.large", "us-east-1b", "spot")


def test_a_marked_offering_cools_down_for_the_ttl_then_comes_back():
    clock = Clock()
    c = OfferingCooldown(ttl_s=60, clock=clock)
    c.mark(A, "InsufficientInstanceCapacity")
    assert c.is_cooling(A) and not c.is_cooling(B) and c.excluded() == {A}
    clock.t += 59.9
    assert c.is_cooling(A)
    clock.t += 0.2
    assert not c.is_cooling(A) and c.excluded() == frozenset() and c.active() == []


def test_the_same_offering_in_another_market_is_not_cooled():
    c = OfferingCooldown(ttl_s=60, clock=Clock())
    c.mark(A)
    assert not c.is_cooling(Offering("m5.large", "us-east-1a", "on-demand"))


def test_marking_again_extends_but_never_shortens():
    clock = Clock()
    c = OfferingCooldown(ttl_s=60, clock=clock)
    c.mark(A, ttl_s=600)
    c.mark(A)  # shorter: ignored
    clock.t += 300
    assert c.is_cooling(A)
    assert c.active()[0].until == 1600


def test_clear_one_or_all():
    c = OfferingCooldown(ttl_s=60, clock=Clock())
    c.mark(A), c.mark(B)
    c.clear(A)
    assert c.excluded() == {B}
    c.clear()
    assert c.excluded() == frozenset()


def test_negative_ttl_is_refused():
    with pytest.raises(ValueError, match="ttl"):
        OfferingCooldown(ttl_s=-1)


def test_protection_after_n_consecutive_boot_failures_with_a_reason():
    p = PoolProtection(threshold=3, clock=Clock(5.0))
    p.record_boot_failure("aws", "boot timeout")
    p.record_boot_failure("aws", "boot timeout")
    assert not p.is_protected("aws")
    s = p.record_boot_failure("aws", "slurmd never registered")
    assert s.protected and "3 consecutive boot failures" in s.reason and "slurmd never registered" in s.reason
    assert s.since == 5.0 and not p.is_protected("gcp")


def test_a_success_resets_the_count_but_not_protection():
    p = PoolProtection(threshold=2)
    p.record_boot_failure("aws", "x")
    p.record_boot_success("aws")
    p.record_boot_failure("aws", "x")
    assert not p.is_protected("aws")
    p.record_boot_failure("aws", "x")
    assert p.is_protected("aws")
    p.record_boot_success("aws")
    assert p.is_protected("aws")  # only an admin clears it
    p.clear("aws")
    assert not p.is_protected("aws") and p.state("aws").consecutive_failures == 0


def test_protection_round_trips_through_a_dict():
    p = PoolProtection(threshold=1, clock=Clock(7.0))
    p.record_boot_failure("gcp", "no munge key")
    q = PoolProtection.from_dict(p.to_dict(), threshold=1)
    assert q.state("gcp") == p.state("gcp") and q.is_protected("gcp")


def test_cooldowns_persist_through_the_hook_and_restore():
    from burstd.providers.offerings import offering_key, parse_offering_key

    saved = {}
    clock = Clock()
    c = OfferingCooldown(60, clock=clock, on_mark=lambda e: saved.__setitem__(offering_key(e.offering), (e.until, e.reason)))
    c.mark(A, "ICE")
    assert saved == {"m5.large/us-east-1a/spot": (1060.0, "ICE")}
    fresh = OfferingCooldown(60, clock=clock)
    assert fresh.restore(saved) == 1 and fresh.is_cooling(A)
    assert parse_offering_key(offering_key(B)) == B
    with pytest.raises(ValueError, match="type/zone/market"):
        parse_offering_key("m5.large")
