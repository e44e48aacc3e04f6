"""Budgets and prices as the pure policy code sees them (money in integer micro-dollars)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AccountBudget:
    account: str
    limit_micros: int | None  # None = no budget set (the config's default_account_usd decides)
    spent_micros: int = 0  # recorded spend this period (closed intervals)


@dataclass(frozen=True, slots=True)
class BudgetBook:
    """Budgets and recorded spend for the current period."""

    period_start: float
    period_end: float
    site_limit_micros: int | None = None
    site_spent_micros: int = 0
    burn_rate_cap_micros_per_hour: int | None = None
    accounts: dict[str, AccountBudget] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PriceQuote:
    """The price in force for one pool and market, with its interruption risk prior."""

    pool: str
    market: str  # "spot" | "on-demand"
    price_per_hour_micros: int
    interruption_rate: float = 0.0  # expected preemptions per node-hour (0 for on-demand)
