"""What ``decide()`` derives from the config and the prices alone, prepared once per config (``Prepared``).

The pool views and their offers, what a partition list means, and caches of the answers that depend only
on a job's shape (fit, ranked candidates, waiting thresholds). ``decide()`` prepares afresh on every call;
a caller that runs many cycles under one config and one price list (the simulator) prepares once and
passes it, so each cycle pays only for its snapshot. Pure: no I/O.

    prepared = Prepared(config, prices)
    decisions = decide(snapshot, leases, book, prices, config, now, prepared=prepared)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from burstd.config import Config
from burstd.domain.budget import BudgetBook
from burstd.domain.slurm import Job
from burstd.policy.eligibility import Eligibility
from burstd.policy.offers import (
    Offer, PoolView, PriceInput, effective_cost, job_fit, normalize_prices, pool_offers, risk_cost,
)

if TYPE_CHECKING:
    from burstd.policy.decide import DecideStats

# a shape cache holds at most this many entries (a long-lived daemon sees new job shapes forever)
_CACHE_MAX = 100_000


class Prepared:
    """``config`` and ``prices`` read once: pool views, partition meanings and per-job-shape caches.

    Valid only for the very ``config`` and ``prices`` objects it was built from (``decide()`` checks),
    which must not be changed in place afterwards; nor may a budget book passed with it (a book passed
    again is not validated again)."""

    __slots__ = ("config", "prices", "quotes", "pools", "part_to_pool", "cloud_parts", "onprem", "od_price",
                 "wait_unit", "pool_cap", "acct_pools", "_partition_max", "part_cache", "fit_cache",
                 "cand_cache", "th_cache", "valid_book", "excluded", "eligibility")

    def __init__(self, config: Config, prices: PriceInput):
        self.config, self.prices = config, prices
        self.quotes = quotes = normalize_prices(prices)
        self.pools: dict[str, PoolView] = {}
        self.part_to_pool: dict[str, str] = {}
        for pc in config.pools:
            gpu_types = frozenset(t.gpu_type for t in pc.instance_types)
            cap = pc.node_count if pc.max_nodes is None else min(pc.max_nodes, pc.node_count)
            self.pools[pc.name] = PoolView(pc, cap, pool_offers(pc, quotes), frozenset(pc.features), gpu_types)
            self.part_to_pool[pc.partition] = pc.name
        self.cloud_parts = frozenset(self.part_to_pool)
        self.onprem = frozenset(config.policy.onprem_partitions)
        self.od_price = {name: pv.offers["on-demand"].price_micros for name, pv in self.pools.items()
                         if "on-demand" in pv.offers}
        self.wait_unit = _wait_units(self.pools, self.od_price)
        self.pool_cap = {name: pv.cap for name, pv in self.pools.items()}
        self.acct_pools = any(p.accounts is not None for p in config.pools)
        pol = config.policy
        # the hard gates: who may use cloud nodes at all (the launch guard's rule too), and the pending reasons
        # that may burst
        self.eligibility = Eligibility.of(config)
        self.excluded = frozenset(pol.burst_reasons)
        self._partition_max: dict[str, int | None] | None = None
        self.part_cache: dict[tuple[str, ...], _Parts] = {}
        self.fit_cache: dict[tuple, dict[str, str]] = {}
        self.cand_cache: dict[tuple, tuple[list[tuple[float, Offer]], str]] = {}
        self.th_cache: dict[tuple, tuple] = {}
        self.valid_book: BudgetBook | None = None  # the last budget book decide() validated (not again)

    def begin(self, partition_max: dict[str, int | None]) -> None:
        """Start a cycle: partition meanings depend on the snapshot's partitions' MaxTime too, and no shape
        cache outgrows ``_CACHE_MAX``."""
        if partition_max != self._partition_max:
            self._partition_max = partition_max
            self.part_cache = {}
        for cache in (self.fit_cache, self.cand_cache, self.th_cache):
            if len(cache) > _CACHE_MAX:
                cache.clear()


@dataclass(frozen=True, slots=True)
class _Parts:
    """What a job's partition list means for policy (cached per distinct list)."""

    cloud: tuple[str, ...]  # cloud partitions it already carries
    home: tuple[str, ...]  # its on-prem partitions
    managed: bool  # at least one home partition is in policy.onprem_partitions
    excluded: str  # excluded home partitions, "" if none
    floor: float  # min wait from policy.min_wait_s_by_partition
    allowed: frozenset[str] | None  # pools from policy.burst_to; None = every pool
    max_time_min: int | None  # the first home partition's MaxTime (for jobs without a limit)


def _parts_info(parts, cloud_parts, onprem, pol, partition_max) -> _Parts:
    cloud = tuple(p for p in parts if p in cloud_parts)
    home = tuple(p for p in parts if p not in cloud_parts)
    managed = not onprem or bool(set(home) & onprem)
    excluded = ",".join(sorted(set(home) & set(pol.exclude_partitions)))
    floor = max([pol.min_wait_s_by_partition.get(p, 0.0) for p in home] + [0.0])
    allowed = None
    for p in home:
        if p in pol.burst_to:
            allowed = (allowed or frozenset()) | frozenset(pol.burst_to[p])
    max_time = next((partition_max[p] for p in home if partition_max.get(p)), None)
    return _Parts(cloud, home, managed, excluded, floor, allowed, max_time)


def _candidates(job: Job, pools: dict[str, PoolView], eligibility: Eligibility, allowed: frozenset[str] | None,
                fits: dict[str, str],
                escalated: bool, node_units: int, limit_s: float, ckpt_s: float, boot_s: float,
                stats: DecideStats | None, risk_nodes: int = 0) -> tuple[list[tuple[float, Offer]], str]:
    candidates: list[tuple[float, Offer]] = []
    misfit = ""
    for name, pool in pools.items():
        if allowed is not None and name not in allowed:
            continue
        if (why := eligibility.pool_gate(name, job.account)) is not None:
            misfit = misfit or why
            continue
        why = fits.get(name)
        if why is None:
            if stats is not None:
                stats.fit_checks += 1
            why = fits[name] = job_fit(job, pool)
        if why:
            misfit = misfit or why
            continue
        for market, offer in pool.offers.items():
            if escalated and market == "spot":
                continue
            if risk_nodes:
                c = risk_cost(offer, risk_nodes, node_units, limit_s, ckpt_s, boot_s)
            else:
                c = effective_cost(offer, node_units, limit_s, ckpt_s, boot_s)
            candidates.append((c, offer))  # INF (never finishes on spot) ranks last, still an option
    candidates.sort(key=lambda c: (c[0], c[1].pool, c[1].market))
    return candidates, misfit


def _wait_units(pools: dict[str, PoolView], od_price: dict[str, int]) -> tuple[int, int]:
    """The price of an hour of wait, per job kind (CPU, GPU): the site's cheapest on-demand node of that kind.

    One price for every job of a kind, whatever node it needs: mean JCT counts every job once, so an hour of an
    8-GPU job's wait is worth no more than an hour of a 1-GPU job's (pricing it at the job's own node made big
    jobs burst as readily as small ones). CPU and GPU jobs keep their own units (prices a hundredfold apart).
    0: no on-demand offer of that kind (the job's own pool's price is used)."""
    units = [0, 0]
    for name, price in od_price.items():
        kind = 1 if pools[name].cfg.gpus > 0 else 0
        if not units[kind] or price < units[kind]:
            units[kind] = price
    return units[0], units[1]
