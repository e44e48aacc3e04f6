"""Money as integer micro-dollars: exact sums, no float drift (invariant 4).

The one money rule, everywhere burstd shows or hands out an amount:

* stored, summed and sent in JSON as integer **micro-dollars**; a JSON field says so in its name
  (``spend_micro_usd``, ``limit_micro_usd``), never a bare number;
* shown to people by ``format_usd``: dollars and cents, **rounded half-up** (0.005 -> $0.01), with a thousands
  separator; an amount that is not zero but rounds to zero is shown as ``<$0.01``, so a few seconds of a
  cheap VM never read as "nothing was spent";
* read from people (config, ``burstctl budget set``) by ``usd_to_micros``: finite decimals, exact to the
  micro-dollar.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

Micros = int
MICROS_PER_USD = 1_000_000
_CENT = Decimal("0.01")


def usd_to_micros(usd: float | str | Decimal) -> Micros:
    value = Decimal(str(usd))
    if not value.is_finite():
        raise ValueError(f"not a finite amount of money: {usd!r}")
    return int((value * MICROS_PER_USD).to_integral_value(rounding=ROUND_HALF_EVEN))


def micros_to_usd(micros: Micros) -> Decimal:
    return Decimal(micros) / MICROS_PER_USD


def round_to_cents(micros: Micros) -> Decimal:
    """The amount in dollars, rounded half-up to the cent (the rounding of every shown amount)."""
    return micros_to_usd(micros).quantize(_CENT, rounding=ROUND_HALF_UP)


def format_usd(micros: Micros) -> str:
    """``$1,234.57``; ``-$0.50``; ``<$0.01`` for a non-zero amount under half a cent."""
    cents = round_to_cents(micros)
    if cents == 0 and micros != 0:
        return "<$0.01" if micros > 0 else "-<$0.01"
    return f"{'-' if cents < 0 else ''}${abs(cents):,.2f}"


def cost_micros(price_per_hour_micros: Micros, seconds: float) -> Micros:
    """Cost of ``seconds`` of one node at an hourly price, rounded half-even to the micro-dollar."""
    exact = Decimal(price_per_hour_micros) * Decimal(str(seconds)) / 3600
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))


# What a booked amount paid for: compute (a lease's node time, the spend intervals) or data (burstd.domain.data:
# moving a job's data to a pool and back, and keeping it near the pool).
SPEND_KINDS = ("compute", "transfer_in", "transfer_out", "storage")
DATA_SPEND_KINDS = SPEND_KINDS[1:]
