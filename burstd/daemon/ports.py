"""The seams the daemon's cycle is typed against: what it needs of the lease store (the Slurm adapter's is
``burstd.slurm.base.SlurmAdapter``, a provider's ``burstd.providers.base.Provider``). ``burstd.db.store.Store``
is the implementation; unit-test fakes conform to these protocols, and mypy checks both in CI."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from burstd.db.daemon_state import PauseState, PoolHealthRecord, StoredIntent
from burstd.domain.budget import BudgetBook
from burstd.domain.lease import Lease, LeaseState


class LeaseStore(Protocol):
    """Leases (the durable intent before every cloud call) and the daemon's settings."""

    def create_lease(self, *, pool: str, node_name: str, market: str = "spot", price_per_hour_micros: int = 0,
                     job_ids: Iterable[int] = (), account: str = "", reason: str = "",
                     offering: str | None = None, lease_id: str | None = None, gang: str | None = None,
                     at: float | None = None) -> Lease: ...

    def transition(self, lease_id: str, target: LeaseState | str, reason: str = "", *, at: float | None = None,
                   expect: Any = None, extra: dict[str, Any] | None = None, **fields: Any) -> Lease: ...

    def lease(self, lease_id: str) -> Lease: ...

    def leases(self, states: Iterable[LeaseState | str] | None = None, *, pool: str | None = None,
               node: str | None = None, gang: str | None = None, since: float | None = None,
               limit: int | None = None) -> list[Lease]: ...

    def lease_for_node(self, node_name: str) -> Lease | None: ...

    def queue_intents(self, items: Iterable[tuple[str, str, str, float]]) -> list[int]: ...

    def intents(self) -> list[StoredIntent]: ...

    def forget_intents(self, ids: Iterable[int]) -> int: ...

    def pause_state(self) -> PauseState | None: ...

    def set_pause(self, paused: bool, *, reason: str = "", by: str = "", at: float | None = None) -> PauseState: ...

    def pool_health(self) -> dict[str, PoolHealthRecord]: ...

    def save_pool_health(self, record: PoolHealthRecord, *, at: float | None = None) -> None: ...

    def budget_book(self, period: str | None, now: float, config: Any = None) -> BudgetBook: ...
