"""Issue 24 item 5: the function the transfer engine calls to book a transfer, on a real Store (SQLite)."""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.daemon.data_spend import book_storage, book_transfer
from burstd.daemon.metrics import Metrics
from burstd.db.store import Store

POOL = {"name": "aws-spot", "provider": "local", "partition": "cloud", "node_prefix": "c", "node_count": 2,
        "instance_types": [{"name": "t", "cpus": 4, "memory_mb": 8000}], "price_per_hour": 1.0,
        "data": {"link_mbps": 1000, "transfer_in_per_gb": 0.0, "transfer_out_per_gb": 0.09,
                 "storage_per_gb_month": 0.023}}


@pytest.fixture
def store(tmp_path):
    s = Store.open(f"sqlite:///{tmp_path}/burstd.db")
    yield s
    s.close()


def test_transfers_and_storage_are_priced_booked_once_and_counted(store):
    config, metrics = parse_config({"pools": [POOL]}), Metrics()
    out = book_transfer(store, config, key="job7-out", account="chem", pool="aws-spot", n_bytes=180 * 10**9,
                        direction="out", job_id=7, user="alice", at=1000.0, metrics=metrics)
    assert (out.kind, out.cost_micros) == ("transfer_out", 16_200_000)
    again = book_transfer(store, config, key="job7-out", account="chem", pool="aws-spot", n_bytes=180 * 10**9,
                          direction="out", job_id=7, at=1001.0, metrics=metrics)
    assert again.cost_micros == out.cost_micros
    free_in = book_transfer(store, config, key="job7-in", account="chem", pool="aws-spot", n_bytes=10**9,
                            direction="in", at=1002.0, metrics=metrics)
    kept = book_storage(store, config, key="cache-day-1", account="chem", pool="aws-spot", n_bytes=100 * 10**9,
                        seconds=30 * 86400, at=1003.0, metrics=metrics)
    assert (free_in.cost_micros, kept.cost_micros) == (0, 2_300_000)
    assert store.spend(by="kind") == {"transfer_out": 16_200_000, "storage": 2_300_000, "transfer_in": 0}
    assert store.budget_book("month", 1000.0).accounts["chem"].spent_micros == 18_500_000
    text = metrics.render().decode()
    assert 'burstd_data_spend_usd_total{kind="transfer_out",pool="aws-spot"} 16.2' in text  # booked once
    assert 'burstd_data_bytes_total{direction="out",pool="aws-spot"} 1.8e+11' in text


def test_an_unknown_pool_or_direction_is_a_clear_error(store):
    config = parse_config({"pools": [POOL]})
    with pytest.raises(ValueError, match="no pool 'gcp' in the configuration"):
        book_transfer(store, config, key="k", account="chem", pool="gcp", n_bytes=1, direction="in")
    with pytest.raises(ValueError, match="transfer direction 'sideways'"):
        book_transfer(store, config, key="k", account="chem", pool="aws-spot", n_bytes=1,
                      direction="sideways")  # type: ignore[arg-type]
    assert store.data_spend() == []
