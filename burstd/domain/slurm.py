"""What burstd knows about a Slurm cluster: one immutable snapshot a cycle.

Every Slurm backend (cli, rest, pyslurm) and every Slurm version (22.05 .. 26.05) is normalised into
these types, so nothing above the adapter ever sees a version difference.

Conventions: times are Unix seconds (``None`` when Slurm has none); time limits are minutes (``None``
when unlimited); memory is MiB; states are Slurm's upper-case names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# Base job states that count as "not finished" for burstd.
ACTIVE_JOB_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED"})


@dataclass(frozen=True, slots=True)
class Gres:
    """One generic resource request or offer, e.g. ``gpu:a100:2``."""

    name: str
    type: str | None
    count: int

    def __str__(self) -> str:
        return ":".join([self.name] + ([self.type] if self.type else []) + [str(self.count)])


@dataclass(frozen=True, slots=True)
class Job:
    job_id: int
    name: str
    user: str
    account: str
    partitions: tuple[str, ...]
    state: str  # base state: PENDING, RUNNING, ...
    state_flags: tuple[str, ...] = ()  # e.g. CONFIGURING, POWER_UP_NODE
    reason: str = "None"
    qos: str = ""
    priority: int = 0
    submit_time: int | None = None
    eligible_time: int | None = None
    start_time: int | None = None  # actual start, or the backfill estimate while PENDING
    end_time: int | None = None
    time_limit_min: int | None = None  # None = unlimited
    nodes: str = ""  # hostlist expression of allocated nodes ("" while pending)
    node_count: int = 1
    cpus: int = 1
    memory_mb: int | None = None  # total memory per node asked for, MiB
    gres: tuple[Gres, ...] = ()  # per node
    features: str = ""  # constraint expression as given
    restart_count: int = 0
    comment: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_tasks: str = ""  # "1-9" or "1-3%1" on a pending array meta-record
    het_job_id: int | None = None
    het_job_offset: int | None = None
    hold: bool = False
    # ``sbatch --deadline``: the time it must end by (None: none declared); burstd's Uniform Progress line
    # ends there and its deadline safety net watches it (burstd.policy.progress)
    deadline: int | None = None
    # ``sbatch -w``: the hostlist the job must run on ("" = anywhere); a burst needs every one of them in the pool
    required_nodes: str = ""
    # ``sbatch -x``: the hostlist the job must not run on ("" = none); a burst needs enough of the pool's others
    excluded_nodes: str = ""
    # ``sbatch --reservation``: the reservation(s) it runs in ("" = none asked; a pending job shows only what it
    # asked for, never a MAGNETIC reservation it could be placed in); Slurm starts it on no other node
    reservation: str = ""

    @property
    def is_pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def is_running(self) -> bool:
        return self.state in ("RUNNING", "CONFIGURING", "COMPLETING")

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def gpus(self) -> int:
        return sum(g.count for g in self.gres if g.name == "gpu")

    @property
    def display_id(self) -> str:
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.array_tasks:
            return f"{self.job_id}_[{self.array_tasks}]"
        return str(self.job_id)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    state: str  # base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: tuple[str, ...] = ()  # CLOUD, POWERED_DOWN, POWERING_UP, DRAIN, NOT_RESPONDING, ...
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    gres: tuple[Gres, ...] = ()
    address: str = ""
    hostname: str = ""
    cpus: int = 0
    memory_mb: int = 0
    reason: str = ""
    boot_time: int | None = None
    instance_id: str = ""

    def has(self, flag: str) -> bool:
        return flag in self.flags

    @property
    def is_cloud(self) -> bool:
        return "CLOUD" in self.flags

    @property
    def is_powered_down(self) -> bool:
        return "POWERED_DOWN" in self.flags

    @property
    def is_powering_up(self) -> bool:
        return "POWERING_UP" in self.flags

    @property
    def is_drained(self) -> bool:
        """Drained or draining (takes no new jobs), however Slurm spells it: a ``DRAIN`` flag (``IDLE+DRAIN``),
        or a ``DRAINED``/``DRAINING`` base state or flag. The one definition: the cycle, the policy's on-prem
        model and the CLI all ask this."""
        return self.state.startswith("DRAIN") or any(f.startswith("DRAIN") for f in self.flags)


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    nodes: str = ""  # hostlist expression
    state: str = "UP"
    max_time_min: int | None = None
    default: bool = False
    total_cpus: int = 0
    total_nodes: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent view of the cluster, taken once per cycle."""

    taken_at: float
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    slurm_version: str = ""
    source: str = ""  # "cli", "rest", "pyslurm", or the files it was read from
    _node_index: dict[str, Node] | None = field(default=None, compare=False, repr=False)
    _jobs_by_node: dict[str, tuple[Job, ...]] | None = field(default=None, compare=False, repr=False)

    def node(self, name: str) -> Node | None:
        # indexed on first use: the simulator makes a snapshot a cycle and never looks a node up
        index = self._node_index
        if index is None:
            index = {n.name: n for n in self.nodes}
            object.__setattr__(self, "_node_index", index)
        return index.get(name)

    def jobs_by_node(self) -> dict[str, tuple[Job, ...]]:
        """node -> the jobs whose node list names it (whatever their state), in queue order. Built on first use,
        each job's hostlist expanded once; a job whose hostlist does not parse is on no node."""
        by_node = self._jobs_by_node
        if by_node is None:
            from burstd.domain.hostlist import HostlistError, expand  # pure parsing of Slurm's own notation

            index: dict[str, list[Job]] = {}
            for job in self.jobs:
                if not job.nodes:
                    continue
                try:
                    for name in dict.fromkeys(expand(job.nodes, validate=True)):
                        index.setdefault(name, []).append(job)
                except HostlistError:
                    continue
            by_node = {k: tuple(v) for k, v in index.items()}
            object.__setattr__(self, "_jobs_by_node", by_node)
        return by_node

    def job(self, job_id: int) -> Job | None:
        return next((job for job in self.jobs if job.job_id == job_id), None)

    def account_of(self, job_ids: Iterable[int]) -> str:
        """The Slurm account a lease for ``job_ids`` is charged to: that of the first of them this snapshot
        lists ("" when it lists none). The one rule, for a lease from a resume call and one drift repair records."""
        for job_id in job_ids:
            job = self.job(job_id)
            if job is not None:
                return job.account
        return ""

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return self.jobs_by_node().get(node, ())

    @property
    def pending(self) -> list[Job]:
        return [j for j in self.jobs if j.is_pending]

    @property
    def running(self) -> list[Job]:
        return [j for j in self.jobs if j.is_running]
