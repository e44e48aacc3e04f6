"""The daemon's own state besides leases and money, as values: a capacity cooldown, a request queued for the next
cycle, a pool's launch health and protected mode, the admin's pause. Stored by burstd/db/daemon_state.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cooldown:
    offering: str
    until: float
    reason: str



@dataclass(frozen=True, slots=True)
class StoredIntent:
    """A hook, agent or admin request waiting for the next cycle."""

    intent_id: int
    kind: str  # "suspend" | "resume-fail" | "drain" | "terminate" | "notice" | "parity"
    node: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class PoolHealthRecord:
    """A pool's last launch failure (capacity, quota, config) and its protected mode (repeated boot failures)."""

    pool: str
    consecutive_boot_failures: int = 0
    protected: bool = False
    protected_reason: str = ""
    protected_since: float | None = None
    launch_failure_reason: str = ""
    launch_failure_kind: str = ""
    launch_failure_at: float | None = None


@dataclass(frozen=True, slots=True)
class PauseState:
    paused: bool
    reason: str = ""
    by: str = ""
    since: float = 0.0
