"""What a reconcile cycle decides to do, as data: one small frozen action per step (slurm-gcp style), and the
hook/agent/admin requests (``Intent``) a cycle turns into actions. ``daemon.planning`` makes them, the
``daemon.executor.Executor`` carries them out; nothing here does anything."""

from __future__ import annotations

from dataclasses import dataclass

from burstd.domain.offering import Offering
from burstd.domain.preemption import REASON_PREFIX, REBALANCE_PREFIX


@dataclass(frozen=True, slots=True)
class Launch:
    lease_id: str
    retry: bool = False  # the lease is already LAUNCHING (crash or transient error): call launch again


@dataclass(frozen=True, slots=True)
class Refuse:
    lease_id: str
    reason: str
    power_down: bool = True  # tell Slurm now instead of waiting for ResumeTimeout


@dataclass(frozen=True, slots=True)
class Adopt:
    """A LAUNCHING lease whose instance is in the listing (the launch returned, the record did not)."""

    lease_id: str
    instance_id: str
    launched_at: float


@dataclass(frozen=True, slots=True)
class MarkReady:
    lease_id: str


@dataclass(frozen=True, slots=True)
class Fail:
    """The lease's VM is lost or never came. ``requeue``: the candidate jobs (those it was started for and those on
    the node); the Executor requeues the ones ``planning.jobs_to_requeue`` keeps, judged as of ``since`` (when the
    notice or the failure arrived): never a job that had ended before, or that its user cancelled."""

    lease_id: str
    reason: str
    power_down: bool = True
    requeue: tuple[int, ...] = ()
    since: float | None = None  # None: now


@dataclass(frozen=True, slots=True)
class Requeue:
    """A requeue the daemon owes from before a restart: ``record`` is ``daemon.requeue_record``'s text (the lease,
    its jobs, since when). The jobs still live, or ended by the lost node, go back to the queue; those Slurm
    already has back stay as they are."""

    node: str
    record: str


@dataclass(frozen=True, slots=True)
class Terminate:
    lease_id: str
    reason: str
    instance_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Close:
    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Drain:
    lease_id: str
    reason: str
    jobs: tuple[int, ...] = ()  # the jobs running on the node when the drain (or notice) arrived: recorded


@dataclass(frozen=True, slots=True)
class Undrain:
    """A DRAINING lease whose node an admin resumed in Slurm (``scontrol update state=resume``)."""

    lease_id: str


@dataclass(frozen=True, slots=True)
class TerminateOrphan:
    pool: str
    instance_id: str
    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class CreateLease:
    node: str
    pool: str
    reason: str
    job_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PowerDown:
    node: str
    reason: str
    force: bool = False


@dataclass(frozen=True, slots=True)
class PowerUp:
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BootReplacement:
    """A notice reclaims the lease's VM while jobs run there: its offering cools down and ``node`` (a powered-down
    node of the same partition) is powered up now, so the jobs' next node boots, elsewhere, while they checkpoint."""

    lease_id: str
    node: str
    offering: Offering | None = None  # where the reclaimed VM runs (from the provider's listing), if known


@dataclass(frozen=True, slots=True)
class AddPartition:
    job_id: int
    partition: str


@dataclass(frozen=True, slots=True)
class SetJobMarket:
    """Record the market the policy decided for a job (None: its pool's own), durably, before its cloud
    partition is added: the lease later created for its node launches in it (``burstd.daemon.markets``)."""

    job_id: int
    market: str | None


@dataclass(frozen=True, slots=True)
class RemovePartition:
    job_id: int
    partition: str


@dataclass(frozen=True, slots=True)
class StartNow:
    """``scontrol update starttime=now``: a preempted job that requeued itself need not wait out the requeue hold."""

    job_id: int


@dataclass(frozen=True, slots=True)
class ReleaseJob:
    """``scontrol release``: Slurm holds a job whose cloud node failed to launch; burstd lets it run again."""

    job_id: int


@dataclass(frozen=True, slots=True)
class ClearReason:
    """Clear burstd's own leftover reason (``reason``) on a cloud node back to powered down with no lease."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReturnToService:
    """``scontrol update state=RESUME`` on a powered-down cloud node Slurm left DOWN after a failed power-up."""

    node: str
    reason: str


Action = (
    Launch | Refuse | Adopt | MarkReady | Fail | Requeue | Terminate | Close | Drain | Undrain | TerminateOrphan
    | CreateLease | PowerDown | PowerUp | BootReplacement | AddPartition | SetJobMarket | RemovePartition
    | ReleaseJob | StartNow | ReturnToService | ClearReason
)

#: Slurm's reason for a cloud node it marked DOWN because it did not register within ResumeTimeout.
RESUME_TIMEOUT_REASON = "ResumeTimeout reached"

#: How burstd's own reasons on a node begin: the daemon's (``OWN_REASON`` + why) and the agent's drains. Only
#: these are cleared once the node is back to powered down with no lease; any other reason is an admin's.
OWN_REASON = "burstd: "
OWN_REASON_PREFIXES = (OWN_REASON, "burstd refused: ", f"{REASON_PREFIX}: ", f"{REBALANCE_PREFIX}: ")


def own_reason(reason: str) -> bool:
    """Whether burstd (daemon or agent) set this node reason."""
    return reason.startswith(OWN_REASON_PREFIXES)


#: Slurm's reason for a job it requeued and held after its (cloud) node failed to come up.
LAUNCH_FAILED_HELD = "launch_failed_requeued_held"


@dataclass(frozen=True, slots=True)
class Intent:
    """Something a hook, the agent or an admin asked for; applied by the next cycle."""

    kind: str  # "suspend" | "resume-fail" | "drain" | "terminate" | "notice" | "parity" | "gc" (an orphan sweep: intake.GC)
    node: str
    reason: str = ""
    at: float = 0.0
    intent_id: int = 0  # its row in the store's queue (0: read from Slurm, not queued)
