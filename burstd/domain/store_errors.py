"""The Store's errors; each message says what happened and to which lease or account."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from burstd.domain.lease import LeaseState

if TYPE_CHECKING:
    from burstd.domain.lease import Lease


class StoreError(Exception):
    """Base class of the Store's errors; the message says what happened and to which lease/account."""


class LeaseNotFound(StoreError, LookupError):
    pass


class StaleLease(StoreError):
    """The lease is not in the state the caller expected (another writer moved it first). Nothing was written."""

    def __init__(self, lease_id: str, expected: Iterable[LeaseState], actual: LeaseState):
        self.lease_id, self.expected, self.actual = lease_id, tuple(expected), actual
        super().__init__(
            f"lease {lease_id} is {actual}, not {' or '.join(sorted(self.expected))}: "
            "another writer moved it first; re-read it and decide again"
        )


class NodeBusy(StoreError):
    """The node already has an open lease; a node can back at most one VM at a time."""

    def __init__(self, node_name: str, lease: Lease | None):
        self.node_name, self.lease = node_name, lease
        held = f"lease {lease.lease_id} ({lease.state})" if lease else "another lease"
        super().__init__(f"node {node_name} already has an open lease: {held}; close it before leasing the node again")


class BudgetError(StoreError, ValueError):
    """A budget that cannot be stored (negative, not a number, unknown period...). Nothing was written."""


class SpendConflict(StoreError):
    """Spend that overlaps what is already recorded for a lease (a retry after a crash). Nothing was written."""



class StoreBusy(StoreError):
    """Another writer held the database lock past the caller's wait (``engine.lock_wait``). Nothing was written
    by the transaction that gave up."""
