"""Booking data costs to the job's account, like compute: what the transfer engine (``burstd.data``) calls when a
transfer finishes, and the pool cache when it bills storage.

    book_transfer(store, config, key="xfer-7-in", account="chem", pool="aws-spot", n_bytes=180 * 10**9,
                  direction="in", job_id=7, user="alice")       # -> DataSpend (its cost at the pool's prices)
    book_storage(store, config, key="cache-aws-spot-2026-11-26", account="chem", pool="aws-spot",
                 n_bytes=..., seconds=86400)

Prices come from the pool's ``[pools.data]`` section (``burstd.policy.data_cost``). Booking is idempotent by
``key``: a transfer retried after a crash books once. The amounts count against the account's budget (the
budget book sums compute and data), show in ``burstctl spend --by kind`` and the plot, and in the metrics
``burstd_data_spend_usd_total{kind,pool}`` and ``burstd_data_bytes_total{direction,pool}``.
"""

from __future__ import annotations

import time
from typing import Literal, Protocol, runtime_checkable

from burstd.config import Config, PoolDataConfig
from burstd.daemon.metrics import Metrics
from burstd.domain.leadership import Fence
from burstd.domain.data import DataSpend
from burstd.domain.money import MICROS_PER_USD
from burstd.policy.data_cost import storage_micros, transfer_micros


@runtime_checkable
class DataSpendLedger(Protocol):
    """What booking needs of the Store (``LedgerRecords.book_data_spend``)."""

    def book_data_spend(self, item: DataSpend, *, fence: Fence | None = None) -> bool: ...


def _pool_data(config: Config, pool: str) -> PoolDataConfig:
    for pc in config.pools:
        if pc.name == pool:
            return pc.data
    raise ValueError(f"no pool {pool!r} in the configuration ([[pools]] name): cannot price its data")


def _book(ledger: DataSpendLedger, item: DataSpend, fence: Fence | None, metrics: Metrics | None,
          direction: str | None) -> DataSpend:
    if ledger.book_data_spend(item, fence=fence) and metrics is not None:
        metrics.data_spend.labels(item.kind, item.pool).inc(item.cost_micros / MICROS_PER_USD)
        if direction is not None:
            metrics.data_bytes.labels(direction, item.pool).inc(item.n_bytes)
    return item


def book_transfer(ledger: DataSpendLedger, config: Config, *, key: str, account: str, pool: str, n_bytes: int,
                  direction: Literal["in", "out"], job_id: int | None = None, user: str | None = None,
                  at: float | None = None, fence: Fence | None = None,
                  metrics: Metrics | None = None) -> DataSpend:
    """Book a finished transfer of ``n_bytes`` to ``pool`` (``"in"``) or home from it (``"out"``) to ``account``
    at the pool's per-GB price. The same ``key`` again books nothing more (and returns the same amount)."""
    if n_bytes < 0:
        raise ValueError(f"a transfer moves 0 bytes or more, not {n_bytes}")
    cost = transfer_micros(n_bytes, _pool_data(config, pool), direction)
    item = DataSpend(key, f"transfer_{direction}", pool, account, n_bytes, time.time() if at is None else at, cost,
                     job_id, user)
    return _book(ledger, item, fence, metrics, direction)


def book_storage(ledger: DataSpendLedger, config: Config, *, key: str, account: str, pool: str, n_bytes: int,
                 seconds: float, job_id: int | None = None, at: float | None = None, fence: Fence | None = None,
                 metrics: Metrics | None = None) -> DataSpend:
    """Book ``n_bytes`` kept near ``pool`` for ``seconds`` to ``account`` at its per-GB-month price."""
    if n_bytes < 0 or not seconds >= 0:
        raise ValueError(f"storage needs bytes >= 0 and seconds >= 0, not {n_bytes}, {seconds}")
    cost = storage_micros(n_bytes, seconds, _pool_data(config, pool))
    item = DataSpend(key, "storage", pool, account, n_bytes, time.time() if at is None else at, cost, job_id)
    return _book(ledger, item, fence, metrics, None)
