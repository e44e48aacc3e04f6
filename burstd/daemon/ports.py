"""The seams the daemon's cycle is typed against: what it needs of the lease store (the Slurm adapter's is
``burstd.slurm.base.SlurmAdapter``, a provider's ``burstd.providers.base.Provider``). ``burstd.db.store.Store``
is the implementation; unit-test fakes conform to these protocols, and mypy checks both in CI.

``LeaseStore`` is everything the cycle touches; its parts name what each piece needs: ``SpendLedger`` (the spend
step, ``daemon.spend``), ``CooldownStore`` and ``PoolHealthStore`` (``daemon.pools``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from burstd.domain.budget import Allocation, BudgetBook, SpendInterval
from burstd.domain.daemon_state import Cooldown, PauseState, PoolHealthRecord, StoredIntent
from burstd.domain.data import DataSpend
from burstd.domain.leadership import Fence, LeaderRecord
from burstd.domain.lease import Lease, LeaseEvent, LeaseState


class SpendLedger(Protocol):
    """The money path: who held a lease's node (allocations, from each cycle's snapshot) and one atomic accrual
    per lease. ``accrue_spend`` is the only way the daemon writes spend: it reads the lease, its prices and its
    allocations and records ``burstd.domain.ledger.accrue``'s intervals in one transaction (under ``fence``,
    checked in that transaction), so attributed + overhead is the lease's cost exactly (invariant 4) and a
    second accruer finds nothing left to do."""

    def leases(self, states: Iterable[LeaseState | str] | None = None, *, pool: str | None = None,
               node: str | None = None, gang: str | None = None, since: float | None = None,
               limit: int | None = None) -> list[Lease]: ...

    def allocations(self, lease_id: str) -> list[Allocation]: ...

    def record_allocations(self, lease_id: str, allocations: Iterable[Allocation]) -> int: ...

    def accrue_spend(self, lease_id: str, until: float, *, split_every_s: float | None = 3600.0,
                     fence: Fence | None = None) -> list[SpendInterval]: ...


class CooldownStore(Protocol):
    """Offerings cooling down after a capacity error, kept across restarts (offering key -> until, why)."""

    def cooldowns(self, now: float | None = None) -> dict[str, Cooldown]: ...

    def set_cooldown(self, offering: str, until: float, reason: str = "", *, at: float | None = None) -> None: ...


class PoolHealthStore(CooldownStore, Protocol):
    """Per-pool launch health (protected mode, the last launch failure) and the capacity cooldowns."""

    def pool_health(self) -> dict[str, PoolHealthRecord]: ...

    def save_pool_health(self, record: PoolHealthRecord, *, at: float | None = None) -> None: ...


class LeaseStore(SpendLedger, PoolHealthStore, Protocol):
    """Leases (the durable intent before every cloud call) and the daemon's settings."""

    def create_lease(self, *, pool: str, node_name: str, market: str = "spot", price_per_hour_micros: int = 0,
                     job_ids: Iterable[int] = (), account: str = "", reason: str = "",
                     offering: str | None = None, lease_id: str | None = None, gang: str | None = None,
                     at: float | None = None) -> Lease: ...

    def transition(self, lease_id: str, target: LeaseState | str, reason: str = "", *, at: float | None = None,
                   expect: Any = None, extra: dict[str, Any] | None = None, fence: Fence | None = None,
                   **fields: Any) -> Lease: ...

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

    def job_markets(self) -> dict[int, str]: ...

    def set_job_market(self, job_id: int, market: str | None, *, at: float | None = None) -> None: ...

    def forget_job_markets(self, job_ids: Iterable[int]) -> int: ...

    def budget_book(self, period: str | None, now: float, config: Any = None) -> BudgetBook: ...

    # active/standby (``burstd.db.leadership``): the election row and the fence on cloud intents
    def claim_leadership(self, holder: str, lease_s: float, *, now: float | None = None) -> LeaderRecord: ...

    def resign_leadership(self, holder: str) -> bool: ...

    def leader(self, *, now: float | None = None) -> LeaderRecord | None: ...

    def check_fence(self, fence: Fence) -> None: ...

    def record_orphan_termination(self, pool: str, instance_id: str, *, lease_id: str | None = None,
                                  reason: str = "", fence: Fence | None = None, at: float | None = None) -> int: ...

class RecordsStore(LeaseStore, Protocol):
    """What the control facade also reads: the lease event log, budgets and the spend ledger (``db.store.Store``)."""

    def events(self, lease_id: str | None = None, *, limit: int = 100) -> list[LeaseEvent]: ...

    def set_budget(self, account: str, usd: Any, *, period: str = "month", at: float | None = None) -> Any: ...

    def budgets(self, period: str | None = None) -> list[Any]: ...

    def spend(self, by: str = "account", since: float | None = None, until: float | None = None) -> dict[str, int]: ...

    def spend_intervals(self, lease_id: str | None = None, since: float | None = None,
                        until: float | None = None) -> list[SpendInterval]: ...

    def spend_series(self, by: str = "account", since: float | None = None,
                     until: float | None = None) -> list[tuple[float, str, int]]: ...

    def data_spend(self, since: float | None = None, until: float | None = None) -> list[DataSpend]: ...
