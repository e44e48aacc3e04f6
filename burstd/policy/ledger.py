"""Moved to burstd/domain/ledger.py (issue 20 seam 4); kept for imports in flight, the merge removes it."""
from burstd.domain.ledger import (  # noqa: F401
    Allocation, LedgerError, PricePoint, SpendInterval, accrue, lease_cost, split_largest_remainder)
