"""Money as integer micro-dollars: exact sums, no float drift (invariant 4)."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

Micros = int
MICROS_PER_USD = 1_000_000


def usd_to_micros(usd: float | str | Decimal) -> Micros:
    value = Decimal(str(usd))
    if not value.is_finite():
        raise ValueError(f"not a finite amount of money: {usd!r}")
    return int((value * MICROS_PER_USD).to_integral_value(rounding=ROUND_HALF_EVEN))


def micros_to_usd(micros: Micros) -> Decimal:
    return Decimal(micros) / MICROS_PER_USD


def format_usd(micros: Micros) -> str:
    return f"${micros_to_usd(micros):,.2f}"


def cost_micros(price_per_hour_micros: Micros, seconds: float) -> Micros:
    """Cost of ``seconds`` of one node at an hourly price, rounded half-even to the micro-dollar."""
    exact = Decimal(price_per_hour_micros) * Decimal(str(seconds)) / 3600
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))
