"""One place a node can be bought: the value the providers list and price, and the policy turns into quotes (a
value type, so the pure policy never imports the providers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Offering:
    """One place a node can be bought: instance type x zone x market."""

    instance_type: str
    zone: str
    market: str  # "spot" | "on-demand"
