"""Price quotes from offerings: what the policy and the budget guard see of prices. Pure, no I/O.

The daemon asks each pool's provider for its offerings and their prices (``Provider.prices()``, cached by
``burstd.daemon.prices.ProviderPrices``); this module only turns them into one ``PriceQuote`` per (pool, market):

    table = price_table(config, offerings={"aws-spot": {Offering("c5.large", "us-east-1a", "spot"): 85_000}},
                        advisor=SpotAdvisor.load("spot-advisor-data.json"))
    table.quotes[("aws-spot", "spot")]   # PriceQuote(price_per_hour_micros=85_000, interruption_rate=...)

- price: the *highest* price among the pool's offerings in that market (the cloud may land on any of them;
  budgets must hold for the worst); a market the provider prices nothing in keeps the configured
  ``price_per_hour`` / ``ondemand_price_per_hour`` (source "config");
- interruption rate (preemptions per node-hour, spot only): a per-offering prior from the Spot Instance Advisor
  bucket of its instance type (the bucket's mid-point frequency per month / 730 h); the pool's quote takes the
  worst offering. No advisor, or no bucket known: 0.
A price that is negative (or not an integer of micro-dollars) is refused with ``PriceError`` naming the pool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from burstd.config import Config, PoolConfig
from burstd.domain.budget import PriceQuote
from burstd.domain.money import usd_to_micros
from burstd.domain.offering import Offering
from burstd.policy.budget import PriceError, validate_quote

HOURS_PER_MONTH = 730.0
# Spot Advisor's interruption-frequency buckets (% of instances interrupted a month): mid-points
BUCKET_MID_PCT = {0: 2.5, 1: 7.5, 2: 12.5, 3: 17.5, 4: 25.0}


class SpotAdvisor:
    """The AWS Spot Instance Advisor snapshot: ``spot_advisor[region]["Linux"][type] = {"s", "r"}``."""

    def __init__(self, data: Mapping[str, Any]):
        try:
            self.ranges = {int(r["index"]): r for r in data["ranges"]}
            self.advice = data["spot_advisor"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a Spot Advisor document: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> SpotAdvisor:
        p = Path(path)
        try:
            return cls(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{p}: cannot read the Spot Advisor data: {exc}") from None

    def bucket(self, region: str, instance_type: str, os: str = "Linux") -> int | None:
        entry = self.advice.get(region, {}).get(os, {}).get(instance_type)
        return None if entry is None else int(entry["r"])

    def savings_pct(self, region: str, instance_type: str) -> float | None:
        entry = self.advice.get(region, {}).get("Linux", {}).get(instance_type)
        return None if entry is None else float(entry["s"])

    def interruption_rate(self, region: str, instance_types: list[str]) -> float | None:
        """Expected interruptions per node-hour for the worst of ``instance_types`` (None: none known)."""
        buckets = [b for t in instance_types if (b := self.bucket(region, t)) is not None]
        if not buckets:
            return None
        return BUCKET_MID_PCT.get(max(buckets), 25.0) / 100.0 / HOURS_PER_MONTH


@dataclass(slots=True)
class PriceTable:
    quotes: dict[tuple[str, str], PriceQuote] = field(default_factory=dict)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)  # "provider" or "config"
    warnings: list[str] = field(default_factory=list)


def _usd(pool: str, text: Any) -> int:
    try:
        value = Decimal(str(text))
    except InvalidOperation:
        raise PriceError(f"pool {pool}: price is not a number: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise PriceError(f"pool {pool}: price must be a finite amount >= 0, got {text!r}")
    return usd_to_micros(value)


def _offering_rate(advisor: SpotAdvisor | None, region: str, instance_type: str, market: str) -> float:
    """One offering's interruption prior (Spot Advisor buckets are per region and instance type)."""
    if advisor is None or market != "spot":
        return 0.0
    rate = advisor.interruption_rate(region, [instance_type])
    return 0.0 if rate is None else rate


def _region(pool: PoolConfig) -> str:
    return pool.aws.region if pool.aws is not None else pool.gcp.region if pool.gcp is not None else ""


def price_table(
    config: Config,
    *,
    offerings: Mapping[str, Mapping[Offering, int]] | None = None,
    advisor: SpotAdvisor | None = None,
) -> PriceTable:
    """Quotes for every pool and market it offers, from ``offerings`` (pool name -> offering -> micro-dollars
    per node-hour, as ``Provider.prices()`` answers; a pool missing: the configured prices)."""
    table = PriceTable()
    for pool in config.pools:
        markets = {pool.market: pool.price_per_hour}
        if pool.ondemand_price_per_hour is not None:
            markets.setdefault("on-demand", pool.ondemand_price_per_hour)
        offered = (offerings or {}).get(pool.name, {})
        region = _region(pool)
        for market, usd in markets.items():
            priced = {o: p for o, p in offered.items() if o.market == market}
            for o, p in priced.items():
                if not isinstance(p, int) or p < 0:
                    raise PriceError(f"pool {pool.name}: price of {o.instance_type}/{o.zone}/{o.market} must be a "
                                     f"non-negative integer of micro-dollars, got {p!r}")
            if priced:
                price, source = max(priced.values()), "provider"
                rates = [_offering_rate(advisor, region, o.instance_type, market) for o in priced]
            else:
                price, source = _usd(pool.name, usd), "config"
                rates = [_offering_rate(advisor, region, t.name, market) for t in pool.instance_types]
            q = PriceQuote(pool.name, market, price, max(rates, default=0.0))
            validate_quote(q)
            table.quotes[(pool.name, market)] = q
            table.sources[(pool.name, market)] = source
    return table
