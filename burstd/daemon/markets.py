"""The market the policy decided for each burst job, kept durably until its node's lease is created.

The policy chooses a (pool, market) per job (``MakeEligible.market``, ``Decisions.markets``): a spot pool's job
preempted ``max_preemptions_spot`` times escalates to on-demand. Slurm only learns the cloud *partition*, and
the lease for the node Slurm then picks is created later, by ResumeProgram (``Intake.request_resume``) or by
drift repair (``CreateLease``). So the decided market is recorded here when the job is made (or kept)
eligible, before its partition is added, and read back when its node's lease is created:

    markets = JobMarkets(store)
    markets.set(job_id, "on-demand")                 # Executor._do_SetJobMarket, before AddPartition
    market, price = markets.lease_terms(pool, job_ids)  # the lease's market and price per node-hour

Only markets that differ from the job's pool's own market are stored (a spot pool's escalations, an on-demand
pool's spot offers), so the setting stays small; a job's entry is dropped once the job has left Slurm.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence

from burstd.config import PoolConfig
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.ports import LeaseStore
from burstd.domain.money import usd_to_micros

log = get_logger("markets")

#: The setting that holds ``{job id: market}`` for jobs decided on a market other than their pool's.
MARKETS_SETTING = "job_markets"
MARKETS = ("spot", "on-demand")


def pool_price_micros(pool: PoolConfig, market: str) -> int:
    """The configured price per node-hour of ``pool`` in ``market`` (on-demand: ``ondemand_price_per_hour``,
    falling back to ``price_per_hour`` when the pool names none, as ``decide`` offers no such market then)."""
    if market != pool.market and market == "on-demand" and pool.ondemand_price_per_hour is not None:
        return usd_to_micros(pool.ondemand_price_per_hour)
    return usd_to_micros(pool.price_per_hour)


class JobMarkets:
    """``job id -> market`` for jobs whose decided market is not their pool's; saved on every change."""

    def __init__(self, store: LeaseStore):
        self._store = store
        self._lock = threading.Lock()  # the intake (hook threads) reads while the cycle writes
        self._markets: dict[int, str] = self._load()

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
            new = dict(self._markets)
            if market is None:
                new.pop(job_id, None)
            else:
                new[job_id] = market
            if new != self._markets:
                self._save(new)  # raises: nothing recorded, the caller does not add the partition
                self._markets = new

    def prune(self, live_jobs: Iterable[int]) -> None:
        """Forget jobs that are no longer in Slurm (finished, cancelled)."""
        live = set(live_jobs)
        with self._lock:
            new = {j: m for j, m in self._markets.items() if j in live}
            if new != self._markets:
                try:
                    self._save(new)
                except Exception as exc:  # noqa: BLE001 - pruned again next cycle
                    log.error("job markets not pruned", extra=ev(error=str(exc)))
                    return
                self._markets = new

    def lease_terms(self, pool: PoolConfig, job_ids: Sequence[int]) -> tuple[str, int]:
        """The market and configured price of a lease for ``job_ids`` in ``pool``: on-demand when any of its jobs
        was decided on-demand (the node must suit every job it is for), else the market recorded for them,
        else the pool's own."""
        with self._lock:
            decided = {self._markets[j] for j in job_ids if j in self._markets}
        market = "on-demand" if "on-demand" in decided else (decided.pop() if decided else pool.market)
        return market, pool_price_micros(pool, market)

    def _save(self, markets: Mapping[int, str]) -> None:
        self._store.set_setting(MARKETS_SETTING, json.dumps({str(j): m for j, m in sorted(markets.items())}))

    def _load(self) -> dict[int, str]:
        raw = self._store.get_setting(MARKETS_SETTING)
        try:
            return {int(j): str(m) for j, m in json.loads(raw or "{}").items() if m in MARKETS}
        except (ValueError, TypeError, AttributeError) as exc:
            log.error("job markets unreadable; dropped", extra=ev(setting=MARKETS_SETTING, error=str(exc)))
            return {}
