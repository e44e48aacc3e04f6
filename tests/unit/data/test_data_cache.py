"""The pool cache: bounded, least recently used evicted first, every stored byte-second reported once."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstd.data.cache import CacheFullError, PoolCache, StorageMeter, StorageUsage


class Meter:
    def __init__(self) -> None:
        self.usages: list[StorageUsage] = []

    def record_storage(self, usages: list[StorageUsage]) -> None:
        self.usages.extend(usages)


def test_meter_conforms_to_the_protocol():
    meter: StorageMeter = Meter()
    assert meter is not None


def test_a_known_digest_is_a_hit_and_an_unknown_one_a_miss():
    c = PoolCache("aws", 100)
    assert not c.lookup("d1", 0)
    c.admit("d1", 10, 0)
    assert c.lookup("d1", 5) and (c.hits, c.misses) == (1, 1)
    assert c.entries["d1"].last_used == 5


def test_the_least_recently_used_blob_goes_first_to_make_room():
    c = PoolCache("aws", 100)
    c.admit("old", 40, 0)
    c.admit("mid", 40, 1)
    c.lookup("old", 2)  # read again: now "mid" is the oldest
    assert c.admit("new", 40, 3) == ["mid"]
    assert set(c.entries) == {"old", "new"} and c.used_bytes == 80


def test_blobs_running_jobs_read_are_kept_and_a_blob_bigger_than_the_cache_is_refused():
    c = PoolCache("aws", 100)
    c.admit("a", 50, 0)
    c.admit("b", 50, 1)
    assert c.admit("new", 50, 2, keep={"a"}) == ["b"]
    with pytest.raises(CacheFullError, match="do not fit"):
        c.admit("other", 60, 3, keep={"a", "new"})
    with pytest.raises(CacheFullError, match="exceed"):
        c.plan_admit(101)


def test_every_stored_byte_second_is_reported_once_including_an_evicted_blobs_last_interval():
    meter = Meter()
    c = PoolCache("gcp", 100, meter)
    c.admit("a", 60, 0)
    c.admit("b", 40, 10)
    c.report(20)
    c.admit("c", 60, 30)  # evicts a (the older), reporting its 20..30
    c.report(40)
    by_digest: dict[str, float] = {}
    for u in meter.usages:
        by_digest[u.digest] = by_digest.get(u.digest, 0) + u.byte_seconds
    assert by_digest == {"a": 60 * 30, "b": 40 * 30, "c": 60 * 10}
    assert all(u.pool == "gcp" for u in meter.usages)
    assert c.report(40) == []  # nothing new


def test_the_index_round_trips_and_a_foreign_file_is_named():
    c = PoolCache("aws", 100)
    c.admit("a", 10, 1)
    back = PoolCache.from_json(c.to_json())
    assert back.entries == c.entries and back.capacity_bytes == 100
    with pytest.raises(ValueError, match="/x/idx.json"):
        PoolCache.from_json("{}", where="/x/idx.json")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(1, 60)), max_size=30))
def test_the_cache_never_holds_more_than_its_capacity_and_billing_never_overlaps(ops):
    meter = Meter()
    c = PoolCache("p", 100, meter)
    sizes: dict[str, int] = {}
    for t, (digest, size) in enumerate(ops):
        size = sizes.setdefault(digest, size)
        c.admit(digest, size, float(t))
        assert c.used_bytes <= 100
        if t % 3 == 0:
            c.report(float(t))
    c.report(float(len(ops)))
    spans: dict[str, list[tuple[float, float]]] = {}
    for u in meter.usages:
        spans.setdefault(u.digest, []).append((u.start, u.end))
    for intervals in spans.values():
        intervals.sort()
        assert all(a[1] <= b[0] for a, b in pairwise(intervals))


def test_reconcile_adopts_blobs_a_dead_run_stored_and_drops_entries_whose_blob_is_gone():
    meter = Meter()
    c = PoolCache("aws", 100, meter)
    c.admit("kept", 10, 0)
    c.admit("lost", 20, 0)
    adopted, dropped = c.reconcile({"kept": 10, "orphan": 30}, now=50)
    assert (adopted, dropped) == (["orphan"], ["lost"])
    assert set(c.entries) == {"kept", "orphan"} and c.entries["orphan"].stored_at == 50
    assert [(u.digest, u.byte_seconds) for u in meter.usages] == [("lost", 20 * 50)]


def test_a_dataset_is_near_the_pool_by_its_keys_until_one_of_its_blobs_is_evicted():
    c = PoolCache("aws", 100)
    c.admit("b1", 40, 0)
    c.admit("b2", 40, 1)
    c.record_dataset(["sha256:" + "d" * 64, "/data/set"], ["b1", "b2"])
    assert c.present_keys() == {"sha256:" + "d" * 64, "/data/set"}
    assert PoolCache.from_json(c.to_json()).present_keys() == c.present_keys()
    c.admit("b3", 40, 2)  # evicts b1, the oldest
    assert c.present_keys() == set()
