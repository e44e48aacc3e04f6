"""Policy: which jobs burst, where, and whether the money is there (pure code, no I/O).

The daemon calls ``decide()`` once a cycle and ``guard_launch()`` right before every launch.
"""

from burstd.policy.budget import BudgetError, GuardVerdict, PriceError, guard_launch
from burstd.policy.decide import DecideStats, decide

__all__ = ["decide", "DecideStats", "guard_launch", "GuardVerdict", "BudgetError", "PriceError"]
