"""The interface every Slurm backend implements. Callers never see which one is in use."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from burstd.domain.slurm import Snapshot

if TYPE_CHECKING:
    from collections.abc import Sequence

    from burstd.domain.jobref import JobRef
    from burstd.domain.sacct import SacctJob, SlurmInstance



#: How soon after a requeue burstd lets the job start again, rather than Slurm's cred_expire + 1 s. A requeue
#: revokes the job's credential on the nodes it ran on, and slurmd refuses every credential of the job created in
#: that second or before (``ctime <= revoked``): a start in the requeue's own second, on a node the job is leaving
#: (a multi-node job's surviving node), is killed ("Killing non-startable batch job: Job credential revoked", seen
#: on the 22.05 bed in the preemption storm) and the job fails for good. Two seconds put every new credential in a
#: later second.
REQUEUE_START_GAP_S = 2

class SlurmError(Exception):
    """A Slurm command or API call failed; the message carries Slurm's own words."""


# Slurm object names that may reach scontrol/REST; everything else is refused before any call.
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
HOSTLIST_RE = re.compile(r"^[A-Za-z0-9_.,\[\]-]{1,65536}$")
PARTITION_RE = NODE_NAME_RE


def check_name(kind: str, value: str, pattern: re.Pattern = NODE_NAME_RE) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"invalid {kind} {value!r}: only letters, digits and _ . - are allowed")
    return value


MAX_REASON = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_reason(reason: str) -> str:
    """Reasons are free text for humans, but one line of printable text, bounded. The one rule for a
    reason: the control API refuses what breaks it (422), so whatever it accepts the adapter carries out."""
    if not isinstance(reason, str) or _CONTROL.search(reason) or len(reason) > MAX_REASON:
        raise ValueError(f"a reason must be one line of at most {MAX_REASON} printable characters")
    return reason


class PartitionEdits:
    """``add_partition``/``remove_partition`` for every backend, on top of its ``_job_partitions`` (the job's
    current list, read fresh) and ``set_partitions``: one rule, so the backends cannot drift apart."""

    def _job_partitions(self, job_id: int) -> list[str]:
        raise NotImplementedError

    def set_partitions(self, job_id: int, partitions: list[str]) -> None:
        raise NotImplementedError

    def add_partition(self, job_id: int, partition: str) -> None:
        check_name("partition", partition, PARTITION_RE)
        current = self._job_partitions(job_id)
        if partition not in current:
            self.set_partitions(job_id, current + [partition])

    def remove_partition(self, job_id: int, partition: str) -> None:
        check_name("partition", partition, PARTITION_RE)
        current = self._job_partitions(job_id)
        if partition in current:
            rest = [p for p in current if p != partition]
            if not rest:
                raise SlurmError(f"job {job_id}: cannot remove its only partition {partition!r}")
            self.set_partitions(job_id, rest)


@runtime_checkable
class SlurmAdapter(Protocol):
    backend: str

    def snapshot(self) -> Snapshot:
        """Jobs (pending and running), nodes and partitions, from one pass over Slurm."""
        ...

    # --- jobs -------------------------------------------------------------------------------
    def set_partitions(self, job_id: int, partitions: list[str]) -> None: ...
    def add_partition(self, job_id: int, partition: str) -> None: ...
    def remove_partition(self, job_id: int, partition: str) -> None: ...
    def requeue(self, job_id: int, *, expedite: bool = False) -> None:
        """Requeue a job; ``expedite``: eligible at once (a preempted job), not after cred_expire."""
        ...
    def job_state(self, job_id: int) -> str | None:
        """The job's base state (``RUNNING``, ``CANCELLED``, ``NODE_FAIL``...) even after it ended, while Slurm
        still knows it (MinJobAge); None once it is gone. One RPC: for the few jobs of a failed node, never per
        cycle."""
        ...
    def start_now(self, job_id: int) -> None:
        """``scontrol update jobid=N starttime=now+REQUEUE_START_GAP_S``: a pending job is eligible almost at once
        (burstd uses it only for a job that requeued itself after a spot notice and waits out Slurm's requeue
        hold, cred_expire + 1 s)."""
        ...
    def release_hold(self, job_id: int) -> None:
        """``scontrol release``: let a held job run again (burstd uses it only for jobs Slurm held after a
        failed cloud node launch, reason ``launch_failed_requeued_held``)."""
        ...
    def signal(self, job_id: int, signal: str, *, batch: bool = False, full: bool = False) -> None:
        """Signal the job's steps (default), only its batch shell (``batch``), or all steps and the batch
        shell (``full``): ``scancel --signal=S [--batch|--full]``."""
        ...

    # --- nodes ------------------------------------------------------------------------------
    def drain(self, nodes: list[str], reason: str) -> None: ...
    def resume(self, nodes: list[str]) -> None: ...
    def clear_reason(self, nodes: list[str]) -> None:
        """Clear the nodes' reason and nothing else (``scontrol update nodename=N reason=``): their state stays."""
        ...
    def power_down(self, nodes: list[str], *, force: bool = False, reason: str = "") -> None: ...
    def power_up(self, nodes: list[str]) -> None: ...
    def set_node_address(self, node: str, address: str, hostname: str | None = None) -> None: ...
    def set_instance(self, node: str, instance_id: str, instance_type: str) -> bool:
        """Record the cloud instance behind ``node`` in Slurm where the release and backend can
        (``features.instance_fields``); False when they cannot (nothing done)."""
        ...

    def ctld_health(self) -> dict[str, Any] | None:
        """Is slurmctld serving (``{"ok", "via", "detail"}``)? None where the backend has no probe."""
        ...

    # --- accounting (slurmdbd) ----------------------------------------------------------------
    def accounting_enabled(self) -> bool:
        """Does this Slurm store accounting in slurmdbd, and can the backend read it? (Only cli can.)"""
        ...
    def accounts(self) -> set[str] | None:
        """Every account slurmdbd knows; None when there is no slurmdbd to ask."""
        ...
    def enforces_associations(self) -> bool | None:
        """Does slurmctld refuse a job whose user has no association with its account? None: cannot tell."""
        ...
    def associations(self) -> set[tuple[str, str]] | None:
        """Every (user, account) association slurmdbd holds (an account's own row: user ""); None without it."""
        ...
    def sacct_jobs(self, since: float, nodes: list[str] | None = None,
                   jobs: Sequence[JobRef] | None = None) -> list[SacctJob]:
        """Allocations slurmdbd recorded from ``since`` on (every run of a requeued job), optionally only those
        that ran on ``nodes`` or of ``jobs`` (an array task ``1234_5`` as Slurm reads it)."""
        ...
    def instances(self, since: float, nodes: list[str] | None = None) -> list[SlurmInstance] | None:
        """Cloud instances slurmdbd recorded from ``since`` on (23.11+); None where none can be recorded."""
        ...
