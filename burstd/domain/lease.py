"""The node-lease state machine: burstd's record of one cloud node's life.

Pure: the table of allowed moves and a function that checks one. The database layer stores leases and
their events; the daemon decides when to move them.

    REQUESTED -> LAUNCHING -> BOOTING -> READY -> DRAINING -> TERMINATING -> TERMINATED
          \\           \\           \\                                  ^
           +-> REFUSED +-> FAILED  +-> FAILED (boot timeout) ---------+
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class LeaseState(StrEnum):
    REQUESTED = "REQUESTED"  # intent recorded; no cloud call made yet
    LAUNCHING = "LAUNCHING"  # provider.launch() in flight (idempotency token = lease id)
    BOOTING = "BOOTING"  # the provider has an instance; slurmd not registered yet
    READY = "READY"  # slurmd registered; the node runs jobs
    DRAINING = "DRAINING"  # no new work (admin drain, preemption notice); finishing what runs
    TERMINATING = "TERMINATING"  # provider.terminate() asked for
    TERMINATED = "TERMINATED"  # the instance is gone and its spend is closed
    REFUSED = "REFUSED"  # never launched: budget guard, paused, capacity cooled down
    FAILED = "FAILED"  # launch or boot failed; an instance may still exist until cleaned up


#: States in which a cloud instance may exist and cost money.
LIVE_STATES = frozenset(
    {LeaseState.LAUNCHING, LeaseState.BOOTING, LeaseState.READY, LeaseState.DRAINING, LeaseState.TERMINATING}
)
#: States from which nothing more happens.
FINAL_STATES = frozenset({LeaseState.TERMINATED, LeaseState.REFUSED})
#: Every other state: the leases a reconcile cycle (and the spend ledger) still looks at.
OPEN_STATES = frozenset(set(LeaseState) - FINAL_STATES)
#: States in which a node's lease is "the" lease: a new resume for the node is a repeat, not a new VM.
ACTIVE_STATES = frozenset(
    {LeaseState.REQUESTED, LeaseState.LAUNCHING, LeaseState.BOOTING, LeaseState.READY, LeaseState.DRAINING}
)

ALLOWED: dict[LeaseState, frozenset[LeaseState]] = {
    LeaseState.REQUESTED: frozenset({LeaseState.LAUNCHING, LeaseState.REFUSED}),
    LeaseState.LAUNCHING: frozenset({LeaseState.BOOTING, LeaseState.FAILED, LeaseState.TERMINATING}),
    LeaseState.BOOTING: frozenset({LeaseState.READY, LeaseState.FAILED, LeaseState.TERMINATING}),
    LeaseState.READY: frozenset({LeaseState.DRAINING, LeaseState.TERMINATING, LeaseState.FAILED}),
    LeaseState.DRAINING: frozenset({LeaseState.TERMINATING, LeaseState.READY, LeaseState.FAILED}),
    LeaseState.TERMINATING: frozenset({LeaseState.TERMINATED}),
    # A FAILED lease may still own an instance (a launch that timed out may have created one):
    # it is cleaned up through TERMINATING, or closed directly when the provider shows none.
    LeaseState.FAILED: frozenset({LeaseState.TERMINATING, LeaseState.TERMINATED}),
    LeaseState.TERMINATED: frozenset(),
    LeaseState.REFUSED: frozenset(),
}


class IllegalTransition(ValueError):
    """A move the state machine does not allow; the message names both states."""


def check_transition(current: LeaseState, target: LeaseState) -> None:
    if target not in ALLOWED[current]:
        allowed = ", ".join(sorted(ALLOWED[current])) or "nothing (final state)"
        raise IllegalTransition(f"lease cannot move {current} -> {target}; from {current} it may go to {allowed}")


def may_own_instance(state: LeaseState) -> bool:
    """True while the provider may hold a VM for this lease (used by orphan reconciliation)."""
    return state in LIVE_STATES or state == LeaseState.FAILED


@dataclass(frozen=True, slots=True)
class Lease:
    """A read-only view of one lease, as the pure code (policy, reconcile decisions) sees it."""

    lease_id: str
    pool: str
    node_name: str
    state: LeaseState
    market: str = "spot"
    instance_id: str | None = None
    price_per_hour_micros: int = 0
    created_at: float = 0.0  # intent recorded
    launched_at: float | None = None  # the provider's launch time: spend starts here
    ready_at: float | None = None
    ended_at: float | None = None  # TERMINATED/FAILED/REFUSED time
    state_since: float = 0.0
    job_ids: tuple[int, ...] = ()  # jobs that asked for / hold the node
    account: str = ""  # account the lease is charged to (the requesting job's), "" = site overhead
    reason: str = ""
    offering: str | None = None  # the capacity offering that launched it (e.g. "m5.large/us-east-1a")
    attempt: int = 0  # launch attempts made so far (the daemon counts; the token stays the lease id)
    accrued_until: float | None = None  # spend recorded up to here (None = nothing recorded yet)
    gang: str | None = None  # leases launched together, all or nothing (a multi-node job): the first one's id

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    """One line of a lease's event log: a transition (``from_state != to_state``), a field update or a note
    (``from_state == to_state``), or the creation (``from_state is None``)."""

    lease_id: str
    at: float
    from_state: LeaseState | None
    to_state: LeaseState
    reason: str = ""
    extra: dict = field(default_factory=dict)
    event_id: int = 0
