"""Budgets and prices as the pure policy code sees them (money in integer micro-dollars)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


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


#: The ``account`` key under which the site-wide budget is stored (not a valid Slurm account name).
SITE = "*"

#: The ``account`` key of jobs submitted without a Slurm account (Slurm reports an empty one): their budget is
#: set with ``burstctl budget set --no-account USD`` (not a valid Slurm account name, so it cannot clash).
NO_ACCOUNT = "(none)"


def budget_key(account: str) -> str:
    """The key a job's account is budgeted under: the account, or ``NO_ACCOUNT`` when it has none."""
    return account or NO_ACCOUNT


@dataclass(frozen=True, slots=True)
class SpendInterval:
    """One piece of a lease's spend: [start, end) at one price, charged to one job or to overhead.

    ``job_id is None`` is boot/idle overhead of the lease (charged to the lease's account). The ledger
    (``burstd.domain.ledger``) produces these so that a lease's intervals sum to its cost exactly.
    """

    lease_id: str
    pool: str
    account: str
    start: float
    end: float
    price_per_hour_micros: int
    cost_micros: int
    job_id: int | None = None
    user: str | None = None

    @property
    def is_overhead(self) -> bool:
        return self.job_id is None


@dataclass(frozen=True, slots=True)
class PricePoint:
    """From ``at`` on, a lease's node costs ``price_per_hour_micros`` (until the next point)."""

    at: float
    price_per_hour_micros: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """A job held a lease's node over [start, end) (``end=None``: still running), as Slurm reported it."""

    job_id: int
    start: float
    end: float | None = None
    account: str = ""
    user: str | None = None
    weight: int = 1  # its share of the node when several jobs share it (CPUs, GPUs...)


PERIODS = ("month", "week", "day")


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """Start and end (Unix seconds) of the budget period holding ``now``, in UTC.

    month: first of the month 00:00 to the next first; week: Monday 00:00 to the next Monday; day: midnight.
    """
    t = datetime.fromtimestamp(now, UTC)
    if period == "day":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=1)
    elif period == "week":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=t.weekday())
        end = start + timedelta(days=7)
    elif period == "month":
        start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    else:
        raise ValueError(f"unknown budget period {period!r}; use one of: {', '.join(PERIODS)}")
    return start.timestamp(), end.timestamp()
