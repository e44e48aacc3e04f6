"""Where not to launch right now: the capacity cooldown cache and pool protected mode.

Both are small, pure, thread-safe objects shared by the cloud providers and owned by the daemon.

    cooldown = OfferingCooldown(ttl_s=config.cloud.capacity_cooldown_s)
    cooldown.mark(Offering("m5.large", "us-east-1a", "spot"), reason="InsufficientInstanceCapacity")
    cooldown.excluded()            # frozenset of offerings still cooling down
    cooldown.is_cooling(offering)  # True until the TTL passes

A capacity error on one offering (instance type x zone x market) steers the next launch elsewhere for a while,
like Karpenter's unavailable-offerings cache. ``PoolProtection`` stops launches in a pool after N consecutive
boot failures, with a reason an admin can read (``burstctl``) and clear; ``to_dict``/``from_dict`` let the
daemon persist it as a setting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from burstd.providers.base import Offering

Clock = Callable[[], float]


def offering_key(o: Offering) -> str:
    """``type/zone/market``: how an offering is named in the database (``Store.set_cooldown``) and the CLI."""
    return f"{o.instance_type}/{o.zone}/{o.market}"


def parse_offering_key(key: str) -> Offering:
    parts = key.split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"offering key {key!r} is not type/zone/market")
    return Offering(*parts)


@dataclass(frozen=True, slots=True)
class Cooling:
    offering: Offering
    until: float
    reason: str


class OfferingCooldown:
    """(instance type, zone, market) -> until. Entries expire by themselves; ``mark`` extends."""

    def __init__(self, ttl_s: float = 600.0, clock: Clock = time.time,
                 on_mark: Callable[[Cooling], None] | None = None):
        """``on_mark`` is called after each mark (outside the lock), e.g. to persist it:
        ``lambda c: store.set_cooldown(offering_key(c.offering), c.until, c.reason)``."""
        if ttl_s < 0:
            raise ValueError(f"cooldown ttl must be >= 0 seconds, got {ttl_s}")
        self.ttl_s = ttl_s
        self._clock = clock
        self._on_mark = on_mark
        self._lock = threading.Lock()
        self._until: dict[Offering, Cooling] = {}

    def restore(self, entries: dict[str, tuple[float, str]] | list[Cooling]) -> int:
        """Load cooldowns saved earlier (``{key: (until, reason)}`` or Cooling objects); returns how many."""
        items = entries if isinstance(entries, list) else [
            Cooling(parse_offering_key(k), float(u), r) for k, (u, r) in entries.items()]
        with self._lock:
            for c in items:
                old = self._until.get(c.offering)
                if old is None or old.until < c.until:
                    self._until[c.offering] = c
        return len(items)

    def mark(self, offering: Offering, reason: str = "", ttl_s: float | None = None) -> Cooling:
        now = self._clock()
        entry = Cooling(offering, now + (self.ttl_s if ttl_s is None else ttl_s), reason)
        with self._lock:
            old = self._until.get(offering)
            if old is None or old.until < entry.until:
                self._until[offering] = entry
            result = self._until[offering]
        if self._on_mark is not None:
            self._on_mark(result)
        return result

    def is_cooling(self, offering: Offering) -> bool:
        with self._lock:
            entry = self._until.get(offering)
            return entry is not None and entry.until > self._clock()

    def active(self) -> list[Cooling]:
        """Offerings still cooling down, soonest-to-expire first (expired entries are dropped)."""
        now = self._clock()
        with self._lock:
            for key in [k for k, v in self._until.items() if v.until <= now]:
                del self._until[key]
            return sorted(self._until.values(), key=lambda c: c.until)

    def excluded(self) -> frozenset[Offering]:
        return frozenset(c.offering for c in self.active())

    def clear(self, offering: Offering | None = None) -> None:
        with self._lock:
            if offering is None:
                self._until.clear()
            else:
                self._until.pop(offering, None)


@dataclass(frozen=True, slots=True)
class ProtectionState:
    pool: str
    consecutive_failures: int = 0
    protected: bool = False
    reason: str = ""
    since: float | None = None


class PoolProtection:
    """Pool-level protected mode: after ``threshold`` consecutive boot failures, stop launching there.

    A success resets the count; protection stays until an admin clears it (it usually means a broken
    image, template, secret or role, which no amount of retrying fixes).
    """

    def __init__(self, threshold: int = 3, clock: Clock = time.time):
        if threshold < 1:
            raise ValueError(f"protection threshold must be >= 1, got {threshold}")
        self.threshold = threshold
        self._clock = clock
        self._lock = threading.Lock()
        self._pools: dict[str, ProtectionState] = {}

    def state(self, pool: str) -> ProtectionState:
        with self._lock:
            return self._pools.get(pool, ProtectionState(pool))

    def is_protected(self, pool: str) -> bool:
        return self.state(pool).protected

    def record_boot_failure(self, pool: str, reason: str) -> ProtectionState:
        with self._lock:
            old = self._pools.get(pool, ProtectionState(pool))
            n = old.consecutive_failures + 1
            if old.protected:
                new = ProtectionState(pool, n, True, old.reason, old.since)
            elif n >= self.threshold:
                why = f"{n} consecutive boot failures; last: {reason}" if reason else f"{n} consecutive boot failures"
                new = ProtectionState(pool, n, True, why, self._clock())
            else:
                new = ProtectionState(pool, n, False, "", None)
            self._pools[pool] = new
            return new

    def record_boot_success(self, pool: str) -> ProtectionState:
        with self._lock:
            old = self._pools.get(pool, ProtectionState(pool))
            new = ProtectionState(pool, 0, old.protected, old.reason, old.since)
            self._pools[pool] = new
            return new

    def clear(self, pool: str) -> ProtectionState:
        with self._lock:
            self._pools.pop(pool, None)
            return ProtectionState(pool)

    def to_dict(self) -> dict[str, dict]:
        with self._lock:
            return {
                p: {"consecutive_failures": s.consecutive_failures, "protected": s.protected,
                    "reason": s.reason, "since": s.since}
                for p, s in self._pools.items()
            }

    @classmethod
    def from_dict(cls, data: dict[str, dict], threshold: int = 3, clock: Clock = time.time) -> PoolProtection:
        obj = cls(threshold, clock)
        for pool, s in data.items():
            obj._pools[pool] = ProtectionState(
                pool, int(s.get("consecutive_failures", 0)), bool(s.get("protected", False)),
                str(s.get("reason", "")), s.get("since"),
            )
        return obj
