"""Price sources per pool, and interruption-risk priors. The daemon refreshes a ``PriceTable`` every few
minutes and hands ``table.quotes`` to ``decide()`` (which stays pure).

    advisor = SpotAdvisor.load("spot-advisor-data.json")           # interruption buckets as risk priors
    table = price_table(config, advisor=advisor, aws_client=lambda pool: boto3.client("ec2", ...))

- ``static`` (local and GCP pools): the configured ``price_per_hour`` / ``ondemand_price_per_hour``;
- ``aws`` spot: the newest ``describe_spot_price_history`` entry per (instance type, AZ) of the pool; the
  pool's quote is the *highest* of them (the fleet may land on any; budgets must hold for the worst);
  on-demand stays the configured price. Any failure falls back to the configured price, and says so;
- interruption rate (preemptions per node-hour) from the Spot Instance Advisor bucket of the pool's
  instance types (worst bucket wins), the bucket's mid-point frequency per month / 730 h.
A price that is NaN, infinite or negative is refused with ``PriceError`` naming the pool.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from burstd.config import Config, PoolConfig
from burstd.domain.budget import PriceQuote
from burstd.domain.money import usd_to_micros
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
    sources: dict[tuple[str, str], str] = field(default_factory=dict)  # "config", "aws-spot-history", ...
    warnings: list[str] = field(default_factory=list)


def _usd(pool: str, text: Any) -> int:
    try:
        value = Decimal(str(text))
    except InvalidOperation:
        raise PriceError(f"pool {pool}: price is not a number: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise PriceError(f"pool {pool}: price must be a finite amount >= 0, got {text!r}")
    return usd_to_micros(value)


def aws_spot_price(pool: PoolConfig, client: Any) -> int:
    """Highest newest spot price (micro-dollars/h) over the pool's instance types and AZs."""
    types = [t.name for t in pool.instance_types]
    resp = client.describe_spot_price_history(InstanceTypes=types, ProductDescriptions=["Linux/UNIX"],
                                              MaxResults=1000)
    newest: dict[tuple[str, str], tuple[Any, Any]] = {}
    for item in resp.get("SpotPriceHistory", []):
        key = (item["InstanceType"], item.get("AvailabilityZone", ""))
        if key not in newest or item["Timestamp"] > newest[key][0]:
            newest[key] = (item["Timestamp"], item["SpotPrice"])
    if not newest:
        raise LookupError(f"no spot price history for {', '.join(types)}")
    return max(_usd(pool.name, p) for (_, p) in newest.values())


def price_table(
    config: Config,
    *,
    advisor: SpotAdvisor | None = None,
    aws_client: Callable[[PoolConfig], Any] | None = None,
) -> PriceTable:
    """Quotes for every pool and market it offers. Network calls only through ``aws_client``."""
    table = PriceTable()
    for pool in config.pools:
        markets = {pool.market: pool.price_per_hour}
        if pool.ondemand_price_per_hour is not None:
            markets.setdefault("on-demand", pool.ondemand_price_per_hour)
        rate = 0.0
        if advisor is not None and pool.provider == "aws" and pool.aws is not None:
            r = advisor.interruption_rate(pool.aws.region, [t.name for t in pool.instance_types])
            if r is not None:
                rate = r
        for market, usd in markets.items():
            price, source = _usd(pool.name, usd), "config"
            if market == "spot" and pool.provider == "aws" and aws_client is not None:
                try:
                    price, source = aws_spot_price(pool, aws_client(pool)), "aws-spot-history"
                except PriceError:
                    raise
                except Exception as exc:  # network, throttling, moto gaps: keep the configured price
                    table.warnings.append(f"pool {pool.name}: spot price history unavailable ({exc}); "
                                          f"using the configured ${usd}/h")
            q = PriceQuote(pool.name, market, price, rate if market == "spot" else 0.0)
            validate_quote(q)
            table.quotes[(pool.name, market)] = q
            table.sources[(pool.name, market)] = source
    return table

