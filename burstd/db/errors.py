"""Moved to burstd/domain/store_errors.py (issue 20 seam 4); kept for imports in flight, the merge removes it."""
from burstd.domain.store_errors import (  # noqa: F401
    BudgetError, LeaseNotFound, NodeBusy, SpendConflict, StaleLease, StoreBusy, StoreError)
