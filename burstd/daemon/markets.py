"""The market the policy decided for each burst job, kept durably until its node's lease is created.

The policy chooses a (pool, market) per job (``MakeEligible.market``, ``Decisions.markets``): a spot pool's job
preempted ``max_preemptions_spot`` times escalates to on-demand. Slurm only learns the cloud *partition*, and
the lease for the node Slurm then picks is created later, by ResumeProgram (``Intake.request_resume``) or by
drift repair (``CreateLease``). So the decided market is recorded here when the job is made (or kept)
eligible, before its partition is added, and read back when its node's lease is created:

    markets = JobMarkets(store)
    markets.set(job_id, "on-demand")                 # Executor._do_SetJobMarket, before AddPartition
    market, price = markets.lease_terms(pool, job_ids)  # the lease's market and price per node-hour

Only markets that differ from the job's pool's own market are stored (the store's ``job_market`` table: a spot
pool's escalations, an on-demand pool's spot offers), so it stays small; a job's entry is dropped once the job
has left Slurm.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from burstd.config import PoolConfig
from burstd.daemon.cycle_errors import step_failed
from burstd.daemon.logging import get_logger
from burstd.daemon.ports import LeaseStore
from burstd.domain.money import usd_to_micros

log = get_logger("markets")

MARKETS = ("spot", "on-demand")


def pool_price_micros(pool: PoolConfig, market: str) -> int:
    """The configured price per node-hour of ``pool`` in ``market`` (on-demand: ``ondemand_price_per_hour``,
    falling back to ``price_per_hour`` when the pool names none, as ``decide`` offers no such market then)."""
    if market != pool.market and market == "on-demand" and pool.ondemand_price_per_hour is not None:
        return usd_to_micros(pool.ondemand_price_per_hour)
    return usd_to_micros(pool.price_per_hour)


class JobMarkets:
    """``job id -> market`` for jobs whose decided market is not their pool's: the store's ``job_market`` table,
    with a copy in memory so a ResumeProgram call reads it without a query."""

    def __init__(self, store: LeaseStore):
        self._store = store
        self._lock = threading.Lock()  # the intake (hook threads) reads while the cycle writes
        self._markets: dict[int, str] = {}
        try:
            self._markets = {j: m for j, m in store.job_markets().items() if m in MARKETS}
        except Exception as exc:  # noqa: BLE001 - unreadable: the pools' own markets until the policy decides again
            step_failed(log, "job markets unreadable", exc)

    def get(self, job_id: int) -> str | None:
        with self._lock:
            return self._markets.get(job_id)

    def recorded(self) -> dict[int, str]:
        with self._lock:
            return dict(self._markets)

    def set(self, job_id: int, market: str | None) -> None:
        """Record ``market`` for ``job_id`` (None: forget it, the pool's own market applies). Durable on return."""
        if market is not None and market not in MARKETS:
            raise ValueError(f"market {market!r} is not one of {', '.join(MARKETS)}")
        with self._lock:
            if self._markets.get(job_id) == market:
                return
            self._store.set_job_market(job_id, market)  # raises: nothing recorded, the partition is not added
            if market is None:
                self._markets.pop(job_id, None)
            else:
                self._markets[job_id] = market

    def prune(self, live_jobs: Iterable[int]) -> None:
        """Forget jobs that are no longer in Slurm (finished, cancelled)."""
        live = set(live_jobs)
        with self._lock:
            gone = [j for j in self._markets if j not in live]
            if not gone:
                return
            try:
                self._store.forget_job_markets(gone)
            except Exception as exc:  # noqa: BLE001 - pruned again next cycle
                step_failed(log, "job markets not pruned", exc)
                return
            for j in gone:
                del self._markets[j]

    def lease_terms(self, pool: PoolConfig, job_ids: Sequence[int]) -> tuple[str, int]:
        """The market and configured price of a lease for ``job_ids`` in ``pool``: on-demand when any of its jobs
        was decided on-demand (the node must suit every job it is for), else the market recorded for them,
        else the pool's own."""
        with self._lock:
            decided = {self._markets[j] for j in job_ids if j in self._markets}
        market = "on-demand" if "on-demand" in decided else (decided.pop() if decided else pool.market)
        return market, pool_price_micros(pool, market)
