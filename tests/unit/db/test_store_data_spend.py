"""Issue 24 item 5: transfer and storage cost in the ledger, booked to the job's account like compute, counted in
the budget book, and shown by kind. Both databases (conftest)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from burstd.db.store import OVERHEAD
from burstd.domain.budget import SpendInterval
from burstd.domain.data import DataSpend

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC).timestamp()


def _lease_with_compute(store, cost):
    lease = store.create_lease(pool="aws-a", node_name="c1", account="chem", at=T0 - 60)
    store.add_spend([SpendInterval(lease.lease_id, "aws-a", "chem", T0, T0 + 3600, 1_000_000, cost, 7, "alice")])
    return lease


def test_data_costs_are_booked_once_counted_in_the_budget_and_grouped_by_kind(store):
    _lease_with_compute(store, 1_000_000)
    stage_in = DataSpend("xfer-1", "transfer_in", "aws-a", "chem", 180 * 10**9, T0 + 10, 16_200_000, 7, "alice")
    assert store.book_data_spend(stage_in) is True
    assert store.book_data_spend(stage_in) is False  # the transfer engine's retry books nothing more
    store.book_data_spend(DataSpend("xfer-2", "transfer_out", "aws-a", "chem", 10**9, T0 + 20, 90_000, 7, "alice"))
    store.book_data_spend(DataSpend("cache-1", "storage", "aws-a", "bio", 10**9, T0 + 30, 23_000))
    assert store.spend(by="kind") == {"transfer_in": 16_200_000, "compute": 1_000_000, "transfer_out": 90_000,
                                      "storage": 23_000}
    assert store.spend(by="account") == {"chem": 17_290_000, "bio": 23_000}
    assert store.spend(by="job") == {"7": 17_290_000, OVERHEAD: 23_000}
    assert store.spend(by="lease")["(data)"] == 16_313_000
    assert store.spend(by="kind", since=T0 + 15) == {"transfer_out": 90_000, "storage": 23_000}
    book = store.budget_book("month", T0)
    assert book.accounts["chem"].spent_micros == 17_290_000 and book.site_spent_micros == 17_313_000
    series = store.spend_series(by="kind")
    assert [(k, c) for _, k, c in series] == [("compute", 1_000_000), ("transfer_in", 16_200_000),
                                              ("transfer_out", 90_000), ("storage", 23_000)]
    assert [d.key for d in store.data_spend()] == ["xfer-1", "xfer-2", "cache-1"]


@pytest.mark.parametrize("bad, words", [
    (DataSpend("k", "egress", "p", "chem", 1, T0, 1), "data spend kind 'egress'"),
    (DataSpend("k", "storage", "p", "chem", -1, T0, 1), "bad data spend"),
    (DataSpend("", "storage", "p", "chem", 1, T0, 1), "key must be"),
    (DataSpend("k", "storage", "p", "chem; drop", 1, T0, 1), "not a valid account name"),
])
def test_bad_data_spend_is_refused_and_nothing_written(store, bad, words):
    with pytest.raises(Exception, match=words):
        store.book_data_spend(bad)
    assert store.data_spend() == []
