"""What is kept in the object store near one pool: bounded, evicted oldest first, its byte-time reported.

Pure bookkeeping (no I/O): the head-side staging asks ``lookup`` before moving a blob, tells ``admit`` after
storing one and deletes from the store whatever ``admit`` evicted. "Oldest" is the least recently used: a
dataset that jobs keep reading stays near the pool. Blobs a running job still reads are passed as ``keep`` and
never evicted.

Storage costs money for as long as bytes sit there. ``report(now)`` hands every stored byte-second since the last
report to a ``StorageMeter`` (the money side books it); an evicted blob's last interval is reported when it goes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Protocol


class CacheFullError(ValueError):
    """A blob larger than the pool's whole cache, or one that fits only by evicting what jobs still read."""


@dataclass(frozen=True)
class StorageUsage:
    pool: str
    digest: str
    size_bytes: int
    start: float  # epoch seconds
    end: float

    @property
    def byte_seconds(self) -> float:
        return self.size_bytes * (self.end - self.start)

    @property
    def gb_hours(self) -> float:
        return self.byte_seconds / 1e9 / 3600


class StorageMeter(Protocol):
    """Books storage near a pool (the money side implements it; burstd.data only reports)."""

    def record_storage(self, usages: list[StorageUsage]) -> None: ...


@dataclass
class CacheEntry:
    digest: str
    size_bytes: int
    stored_at: float
    last_used: float
    billed_until: float


class PoolCache:
    def __init__(self, pool: str, capacity_bytes: int, meter: StorageMeter | None = None):
        if capacity_bytes <= 0:
            raise ValueError(f"cache capacity_bytes must be positive, not {capacity_bytes}")
        self.pool, self.capacity_bytes, self.meter = pool, capacity_bytes, meter
        self.entries: dict[str, CacheEntry] = {}
        self.datasets: dict[str, list[str]] = {}  # cache key ("sha256:<manifest hex>" or a path) -> its blobs
        self.hits = 0
        self.misses = 0

    @property
    def used_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries.values())

    def lookup(self, digest: str, now: float) -> bool:
        """True (and the blob counts as just used) when it is near the pool already."""
        entry = self.entries.get(digest)
        if entry is None:
            self.misses += 1
            return False
        entry.last_used = max(entry.last_used, now)
        self.hits += 1
        return True

    def plan_admit(self, size_bytes: int, keep: Iterable[str] = ()) -> list[str]:
        """Digests to evict, oldest first, so that size_bytes more fit; CacheFullError when they cannot."""
        if size_bytes > self.capacity_bytes:
            raise CacheFullError(f"pool {self.pool}: {size_bytes} bytes exceed the cache's {self.capacity_bytes}")
        keep = set(keep)
        free = self.capacity_bytes - self.used_bytes
        victims: list[str] = []
        for e in sorted(self.entries.values(), key=lambda e: (e.last_used, e.digest)):
            if free >= size_bytes:
                break
            if e.digest in keep:
                continue
            victims.append(e.digest)
            free += e.size_bytes
        if free < size_bytes:
            raise CacheFullError(f"pool {self.pool}: {size_bytes} bytes do not fit beside the blobs jobs still read "
                                 f"({self.used_bytes} of {self.capacity_bytes} used)")
        return victims

    def admit(self, digest: str, size_bytes: int, now: float, keep: Iterable[str] = ()) -> list[str]:
        """Record a stored blob; returns the digests evicted to make room (the caller deletes them)."""
        if digest in self.entries:
            self.lookup(digest, now)
            return []
        victims = self.plan_admit(size_bytes, keep)
        for d in victims:
            self.evict(d, now)
        self.entries[digest] = CacheEntry(digest, size_bytes, now, now, now)
        return victims

    def evict(self, digest: str, now: float) -> None:
        entry = self.entries.pop(digest)
        self._book([entry], now)

    def report(self, now: float) -> list[StorageUsage]:
        """Every byte-second stored since the last report, handed to the meter."""
        return self._book(list(self.entries.values()), now)

    def _book(self, entries: list[CacheEntry], now: float) -> list[StorageUsage]:
        usages = [StorageUsage(self.pool, e.digest, e.size_bytes, e.billed_until, now)
                  for e in entries if now > e.billed_until]
        for e in entries:
            e.billed_until = max(e.billed_until, now)
        if usages and self.meter is not None:
            self.meter.record_storage(usages)
        return usages

    def record_dataset(self, keys: Iterable[str], blobs: Iterable[str]) -> None:
        """Name a staged dataset by its cache keys (``DataNeeds.cache_key``: ``sha256:<manifest digest>``, and
        its on-prem path), so that ``present_keys`` can say it is near the pool."""
        blob_list = sorted(set(blobs))
        for key in keys:
            self.datasets[key] = blob_list

    def present_keys(self) -> set[str]:
        """The cache keys of datasets whose every blob is still near the pool (the decision's ``near``)."""
        for key in [k for k, blobs in self.datasets.items() if not all(b in self.entries for b in blobs)]:
            del self.datasets[key]  # a blob of it was evicted: it would have to move again
        return set(self.datasets)

    def reconcile(self, present: dict[str, int], now: float) -> tuple[list[str], list[str]]:
        """Match the index to what the bucket holds (digest -> size, ``S3Store.blob_sizes``): a blob stored by
        a run that died before saving the index is adopted (as used now), an entry whose blob is gone is
        dropped (its byte-time booked up to now). Returns (adopted, dropped)."""
        dropped = [d for d in self.entries if d not in present]
        for d in dropped:
            self.evict(d, now)
        adopted = [d for d in sorted(present) if d not in self.entries]
        for d in adopted:
            self.entries[d] = CacheEntry(d, present[d], now, now, now)
        return adopted, dropped

    def to_json(self) -> str:
        return json.dumps({"pool": self.pool, "capacity_bytes": self.capacity_bytes,
                           "entries": [asdict(e) for e in self.entries.values()], "datasets": self.datasets},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str, meter: StorageMeter | None = None, where: str = "cache index") -> PoolCache:
        try:
            doc = json.loads(text)
            cache = cls(doc["pool"], int(doc["capacity_bytes"]), meter)
            for e in doc["entries"]:
                entry = CacheEntry(str(e["digest"]), int(e["size_bytes"]), float(e["stored_at"]),
                                   float(e["last_used"]), float(e["billed_until"]))
                cache.entries[entry.digest] = entry
            cache.datasets = {str(k): [str(b) for b in v] for k, v in doc.get("datasets", {}).items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not a pool cache index ({exc!r})") from None
        return cache
