"""The reconcile cycle: read the world once, plan actions as data, apply them, record.

    world = World(now, observed_at, snapshot, listings, leases)
    actions = plan_launches(...) + plan_intents(...) + plan_leases(world, cfg) + plan_orphans(world, cfg)
    Executor(store, adapter, providers).apply(actions)

The ``plan_*`` functions are pure (slurm-gcp style: each (lease state, Slurm node, VM) combination maps
to a small frozen action), so the decision table is tested on its own; the ``Executor`` is the only
code that touches the store, Slurm and the clouds. Every step is safe to repeat (Karpenter-style
level-triggered reconcile), which is what makes a SIGKILL at any instant harmless (invariant 6):

* intent is durable before any cloud call (REQUESTED, then LAUNCHING committed, then ``launch`` with
  the lease id as idempotency token) -- invariant 1;
* tagged instances with no live lease are terminated after ``orphan_grace_s`` -- invariant 2;
* LAUNCHING/BOOTING past their timeout fail, the node is powered down and its jobs requeued -- 3;
* Slurm node state and lease state are compared both ways every cycle -- 6.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from burstd.config import Config
from burstd.daemon.faults import crash_point
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.metrics import Metrics
from burstd.daemon.rules import launch_refusal
from burstd.domain.budget import BudgetBook
from burstd.domain.decisions import Decisions, MakeEligible, Prewarm, Release, RevokeEligible
from burstd.domain.lease import FINAL_STATES, IllegalTransition, Lease, LeaseState, may_own_instance
from burstd.domain.money import cost_micros, usd_to_micros
from burstd.domain.preemption import Notice, parse_preemption_reason
from burstd.domain.slurm import Job, Node, Snapshot
from burstd.providers.base import (
    ErrorKind, Instance, LaunchRequest, Provider, ProviderError, launch_all_or_nothing,
)
from burstd.slurm.base import SlurmError
from burstd.slurm.hostlist import HostlistError, expand

log = get_logger("reconcile")
S = LeaseState

#: Non-final states: the leases a cycle looks at.
OPEN_STATES = frozenset(set(LeaseState) - set(FINAL_STATES))
#: States in which a node's lease is "the" lease: a new resume for the node is a repeat, not a new VM.
ACTIVE_STATES = frozenset({S.REQUESTED, S.LAUNCHING, S.BOOTING, S.READY, S.DRAINING})
#: The setting that holds hook/agent/admin requests not yet applied by a cycle (a JSON list).
INTENTS_SETTING = "pending_intents"
#: A lease that changed less than this before the world was observed is not judged on that world.
FRESH_S = 2.0


# --------------------------------------------------------------------------------------------------
# Actions: what a cycle decided to do (pure data)
# --------------------------------------------------------------------------------------------------
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
    lease_id: str
    reason: str
    power_down: bool = True
    requeue: tuple[int, ...] = ()


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
class AddPartition:
    job_id: int
    partition: str


@dataclass(frozen=True, slots=True)
class RemovePartition:
    job_id: int
    partition: str


@dataclass(frozen=True, slots=True)
class ReleaseJob:
    """``scontrol release``: Slurm holds a job whose cloud node failed to launch; burstd lets it run again."""

    job_id: int


@dataclass(frozen=True, slots=True)
class ReturnToService:
    """``scontrol update state=RESUME`` on a powered-down cloud node Slurm left DOWN after a failed power-up."""

    node: str
    reason: str


Action = (
    Launch | Refuse | Adopt | MarkReady | Fail | Terminate | Close | Drain | Undrain | TerminateOrphan | CreateLease
    | PowerDown | PowerUp | AddPartition | RemovePartition | ReleaseJob | ReturnToService
)

#: Slurm's reason for a cloud node it marked DOWN because it did not register within ResumeTimeout.
RESUME_TIMEOUT_REASON = "ResumeTimeout reached"

#: Slurm's reason for a job it requeued and held after its (cloud) node failed to come up.
LAUNCH_FAILED_HELD = "launch_failed_requeued_held"


@dataclass(frozen=True, slots=True)
class Intent:
    """Something a hook, the agent or an admin asked for; applied by the next cycle."""

    kind: str  # "suspend" | "resume-fail" | "drain" | "terminate" | "notice"
    node: str
    reason: str = ""
    at: float = 0.0


# --------------------------------------------------------------------------------------------------
# The world as one cycle sees it
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class World:
    now: float
    observed_at: float  # when the snapshot and listings were taken
    snapshot: Snapshot | None
    listings: dict[str, tuple[Instance, ...]]  # pool -> instances; a pool missing = its listing failed
    leases: tuple[Lease, ...]  # every lease in an OPEN state

    def instance_of(self, lease: Lease) -> Instance | None:
        for inst in self.listings.get(lease.pool, ()):
            if inst.lease_id == lease.lease_id or (lease.instance_id and inst.instance_id == lease.instance_id):
                if not inst.is_gone:
                    return inst
        return None

    def listed(self, pool: str) -> bool:
        return pool in self.listings

    def fresh(self, lease: Lease) -> bool:
        """Changed too recently for this world to judge it (the world may predate the change)."""
        return lease.state_since > self.observed_at - FRESH_S


def jobs_on_node(snapshot: Snapshot | None, node: str) -> tuple[int, ...]:
    if snapshot is None:
        return ()
    out = []
    for job in snapshot.jobs:
        if job.is_running and job.nodes:
            try:
                if node in expand(job.nodes, validate=True):
                    out.append(job.job_id)
            except HostlistError:
                continue
    return tuple(out)


def notice_reason(kind: str, deadline: float | None = None, detail: str = "") -> str:
    """How a preemption notice is recorded (the intent's and then the DRAINING lease's reason): the same text
    for a notice the agent POSTs to ``/v1/notices`` and one the cycle reads from the node's Slurm reason."""
    return (f"{kind}" + (f" deadline {deadline:.0f}" if deadline else "") + (f": {detail}" if detail else ""))[:200]


def node_notice(node: Node | None, lease: Lease) -> Notice | None:
    """The interruption notice the agent left in the node's Slurm drain reason (``preemption_reason``), when it
    can be about this lease's VM: an admin's reason, a rebalance recommendation, or a notice whose deadline
    predates the lease (left over from the node's previous VM) is None."""
    if node is None or not node.reason:
        return None
    notice = parse_preemption_reason(node.reason)
    if notice is None or notice.kind != "interruption":
        return None
    if notice.deadline <= (lease.launched_at or lease.created_at):
        return None
    return notice


def plan_node_notices(leases: Sequence[Lease], snapshot: Snapshot | None) -> list[Intent]:
    """Server-side preemption notices: a READY lease whose node the agent drained with a ``burstd-preempt``
    reason gets the same "notice" intent an agent report (POST /v1/notices) makes, so ``plan_intents`` drains
    it the same way. Read from Slurm every cycle, so nothing is lost across a daemon restart; a DRAINING
    lease gets nothing (repeated cycles repeat nothing). The deadline is judged in ``plan_leases``."""
    if snapshot is None:
        return []
    out: list[Intent] = []
    for lease in leases:
        if lease.state != S.READY:
            continue
        node = snapshot.node(lease.node_name)
        notice = node_notice(node, lease)
        if notice is not None:
            out.append(Intent("notice", lease.node_name,
                              notice_reason("spot-interruption", notice.deadline, f"Slurm reason {node.reason}"),
                              snapshot.taken_at))
    return out


def node_registered(node: Node | None) -> bool:
    """slurmd on the node has registered: it left POWERING_UP and responds."""
    if node is None:
        return False
    if node.is_powering_up or node.is_powered_down or node.has("NOT_RESPONDING") or node.has("POWERING_DOWN"):
        return False
    return node.state not in ("DOWN", "UNKNOWN", "FUTURE")


def node_drained(node: Node) -> bool:
    """Drained or draining in Slurm, however the state is spelled (``IDLE+DRAIN``, ``DRAINING``, ``DRAINED``)."""
    return node.is_drained or node.state.startswith("DRAIN") or any(f.startswith("DRAIN") for f in node.flags)


def node_released(node: Node | None) -> bool:
    """Slurm considers the node off (powered down or going there) and is not bringing it up."""
    if node is None:
        return False
    return (node.is_powered_down or node.has("POWERING_DOWN") or node.has("POWER_DOWN")) and not node.is_powering_up


# --------------------------------------------------------------------------------------------------
# Pure planning
# --------------------------------------------------------------------------------------------------
def plan_launches(
    leases: Sequence[Lease],
    *,
    paused: bool,
    refusal: Callable[[Lease], str | None] = lambda lease: None,
) -> list[Action]:
    """REQUESTED leases -> Launch, Refuse, or wait (an older lease of the same node still owns a VM).

    A gang (the nodes of one multi-node job, ``Lease.gang``) goes as one: it waits while any member's node
    is busy, is refused whole when any member is refused, and gets one Launch (the Executor launches every
    member with it).
    """
    busy_nodes = {
        lease.node_name for lease in leases if lease.state != S.REQUESTED and may_own_instance(lease.state)
    }
    groups: dict[str, list[Lease]] = {}
    for lease in sorted((lease for lease in leases if lease.state == S.REQUESTED), key=lambda x: x.created_at):
        groups.setdefault(lease.gang or lease.lease_id, []).append(lease)
    out: list[Action] = []
    for members in groups.values():
        if any(m.node_name in busy_nodes for m in members):
            continue  # the previous VM of a node is still being cleaned up
        why = "bursting is paused" if paused else next((w for m in members if (w := refusal(m))), None)
        if why:
            if len(members) > 1:
                why = f"{why} (gang of {len(members)} nodes, all or nothing)"
            out.extend(Refuse(m.lease_id, why) for m in members)
            continue
        out.append(Launch(members[0].lease_id))
    return out


def plan_gangs(
    nodes: Sequence[str],
    jobs: dict[str, tuple[int, ...]],
    pool_of: Callable[[str], str | None],
    all_or_nothing: Callable[[str], bool],
) -> dict[str, str]:
    """node -> the first node of its gang: the nodes Slurm resumes together for one multi-node job (Slurm's
    resume file maps jobs to nodes) in one all-or-nothing pool. A node goes with its first job; nodes whose
    job has no other node here (or no job) are in no gang."""
    by_job: dict[tuple[int, str], list[str]] = {}
    for node in nodes:
        pool = pool_of(node)
        if pool is not None and all_or_nothing(pool) and jobs.get(node):
            by_job.setdefault((jobs[node][0], pool), []).append(node)
    return {node: members[0] for members in by_job.values() if len(members) > 1 for node in members}


def plan_intents(intents: Iterable[Intent], leases: Sequence[Lease], snapshot: Snapshot | None) -> list[Action]:
    """Hook, agent and admin requests -> actions on the node's current lease."""
    by_node: dict[str, Lease] = {}
    for lease in sorted(leases, key=lambda x: x.created_at):
        by_node[lease.node_name] = lease  # newest open lease wins
    out: list[Action] = []
    for it in intents:
        lease = by_node.get(it.node)
        if lease is None:
            continue
        st = lease.state
        if it.kind == "suspend":
            if st == S.REQUESTED:
                out.append(Refuse(lease.lease_id, "Slurm suspended the node before it launched", power_down=False))
            elif st != S.TERMINATING:
                out.append(Terminate(lease.lease_id, it.reason or "SuspendProgram: Slurm released the node"))
        elif it.kind == "resume-fail":
            if st == S.REQUESTED:
                out.append(Refuse(lease.lease_id, "ResumeFailProgram before launch", power_down=False))
            elif st in (S.LAUNCHING, S.BOOTING, S.READY, S.DRAINING):
                out.append(Fail(lease.lease_id, it.reason or "ResumeFailProgram: Slurm gave up on the node",
                                power_down=False))
                out.append(Terminate(lease.lease_id, "failed resume"))
        elif it.kind == "terminate":
            if st == S.REQUESTED:
                out.append(Refuse(lease.lease_id, it.reason or "terminated by admin"))
            elif st != S.TERMINATING:
                out.append(PowerDown(it.node, it.reason or "terminated by admin", force=True))
                out.append(Terminate(lease.lease_id, it.reason or "terminated by admin"))
        elif it.kind in ("drain", "notice"):
            if st == S.READY:
                out.append(Drain(lease.lease_id, it.reason or ("drained by admin" if it.kind == "drain" else "notice")))
    return out


def plan_leases(world: World, config: Config) -> list[Action]:
    """The decision table: (lease state, Slurm node, provider instance) -> actions."""
    d = config.daemon
    snap = world.snapshot
    out: list[Action] = []
    for lease in world.leases:
        st = lease.state
        listed = world.listed(lease.pool)
        inst = world.instance_of(lease) if listed else None
        node = snap.node(lease.node_name) if snap else None
        age = world.now - lease.state_since
        fresh = world.fresh(lease)
        requeue = tuple(dict.fromkeys(lease.job_ids + jobs_on_node(snap, lease.node_name)))

        if st == S.LAUNCHING:
            # The launch returned but its result was not recorded (crash): adopt a running instance. A
            # pending one may be a half-made launch: calling launch again (same token) completes or returns it.
            if inst is not None and inst.state == "running":
                out.append(Adopt(lease.lease_id, inst.instance_id, inst.launched_at))
            elif age > d.launch_timeout_s:
                out.append(Fail(lease.lease_id, f"launch timed out after {age:.0f}s", requeue=requeue))
            elif listed and not fresh:
                out.append(Launch(lease.lease_id, retry=True))
        elif st == S.BOOTING:
            if listed and inst is None and not fresh:
                out.append(Fail(lease.lease_id, "instance vanished while booting", requeue=requeue))
            elif node_registered(node):
                out.append(MarkReady(lease.lease_id))
            elif age > d.boot_timeout_s:
                out.append(Fail(lease.lease_id, f"slurmd did not register within {d.boot_timeout_s:.0f}s",
                                requeue=requeue))
                out.append(Terminate(lease.lease_id, "boot timeout", _ids(inst, lease)))
            elif snap is not None and node_released(node) and not fresh:
                out.append(Terminate(lease.lease_id, "Slurm powered the node down while it booted", _ids(inst, lease)))
        elif st in (S.READY, S.DRAINING):
            if listed and inst is None and not fresh:
                out.append(Fail(lease.lease_id, "instance vanished (preempted or deleted outside burstd)",
                                requeue=requeue))
            elif snap is not None and node_released(node) and not fresh:
                out.append(Terminate(lease.lease_id, "Slurm powered the node down", _ids(inst, lease)))
            elif (notice := node_notice(node, lease)) is not None and notice.deadline <= world.now:
                # the cloud reclaims the VM now (or did): the same path as a vanished instance, and the VM too
                why = f"preempted: notice deadline {notice.deadline:.0f} passed ({node.reason})"
                out.append(Fail(lease.lease_id, why[:200], requeue=requeue))
                out.append(Terminate(lease.lease_id, "preempted (notice deadline passed)", _ids(inst, lease)))
            elif st == S.DRAINING and node is not None and not node_drained(node) and node_registered(node) \
                    and not fresh:
                out.append(Undrain(lease.lease_id))
        elif st == S.TERMINATING:
            if listed and inst is None:
                out.append(Close(lease.lease_id, "instance gone"))
            elif inst is not None and not fresh:  # a fresh one was just asked; the listing predates it
                out.append(Terminate(lease.lease_id, "terminate again (instance still listed)", _ids(inst, lease)))
        elif st == S.FAILED:
            if listed and inst is None:  # keep why it failed as the lease's final reason
                out.append(Close(lease.lease_id, lease.reason or "failed lease has no instance"))
            elif inst is not None:
                out.append(Terminate(lease.lease_id, "clean up failed lease", _ids(inst, lease)))

    # Slurm is bringing a node up and no lease covers it (a resume call was lost): record one. A cloud node Slurm
    # marked DOWN after a failed power-up stays out of service for good once its VM is gone (Slurm never
    # resumes a DOWN node): return it, powered down, to the pool. An admin's own DOWN or DRAIN is left alone.
    if snap is not None:
        covered = {lease.node_name for lease in world.leases}  # one open lease per node (the store's rule)
        for node in snap.nodes:
            if node.is_cloud and node.is_powered_down and node.name not in covered and \
                    "DOWN" in (node.state, *node.flags) and node.reason.startswith(RESUME_TIMEOUT_REASON) and \
                    config.pool_of_node(node.name) is not None:
                out.append(ReturnToService(node.name, node.reason))
            if node.is_cloud and node.is_powering_up and node.name not in covered:
                pool = config.pool_of_node(node.name)
                if pool is not None:
                    out.append(CreateLease(node.name, pool.name, "Slurm is powering the node up without a lease",
                                           jobs_on_node(snap, node.name)))
    return out


def _ids(inst: Instance | None, lease: Lease) -> tuple[str, ...]:
    if inst is not None:
        return (inst.instance_id,)
    return (lease.instance_id,) if lease.instance_id else ()


def plan_orphans(world: World, config: Config) -> list[Action]:
    """Tagged instances whose lease is not open: terminate once older than ``orphan_grace_s``."""
    known = {lease.lease_id for lease in world.leases}
    out: list[Action] = []
    for pool, instances in world.listings.items():
        for inst in instances:
            if inst.is_gone or (inst.lease_id and inst.lease_id in known):
                continue
            if world.now - inst.launched_at < config.daemon.orphan_grace_s:
                continue
            out.append(TerminateOrphan(pool, inst.instance_id, inst.lease_id,
                                       "no open lease" if inst.lease_id else "untagged instance"))
    return out


def plan_held(snapshot: Snapshot | None, failed_jobs: Iterable[int] = ()) -> list[Action]:
    """Jobs Slurm held because their cloud node failed to launch: release them (burstd already failed the
    lease and, for an exhausted pool, removed its partition), so they run wherever they can. A job is
    released when Slurm names that reason, or when it is held and was on a lease burstd failed lately
    (``failed_jobs``); a hold an admin or user put on any other job is left alone."""
    if snapshot is None:
        return []
    failed = set(failed_jobs)
    out: list[Action] = []
    for job in snapshot.pending:
        held = job.hold or "REQUEUE_HOLD" in job.state_flags or "held" in job.reason.lower()
        if job.reason == LAUNCH_FAILED_HELD or (job.job_id in failed and held):
            out.append(ReleaseJob(job.job_id))
    return out


def plan_blocked(snapshot: Snapshot | None, blocked: dict[str, str], config: Config) -> list[Action]:
    """Pending jobs that may run in a pool that takes no launches now (every offering exhausted, quota,
    protected mode): remove that cloud partition so they run on-prem. Level-triggered: repeats each cycle."""
    if snapshot is None or not blocked:
        return []
    parts = set()
    for name in blocked:
        try:
            parts.add(config.pool(name).partition)
        except KeyError:
            continue
    out: list[Action] = []
    for job in snapshot.pending:
        if len(job.partitions) > 1:
            for part in job.partitions:
                if part in parts:
                    out.append(RemovePartition(job.job_id, part))
    return out


def plan_decisions(decisions: Decisions, config: Config, blocked: dict[str, str] | None = None) -> list[Action]:
    out: list[Action] = []
    blocked_parts = set()
    for name in blocked or {}:
        try:
            blocked_parts.add(config.pool(name).partition)
        except KeyError:
            continue
    for d in decisions.eligible:
        if d.partition in blocked_parts:
            continue  # the pool cannot launch now: the job stays on-prem (``burstctl status`` says why)
        out.append(AddPartition(d.job_id, d.partition))
    for r in decisions.revoke:
        out.append(RemovePartition(r.job_id, r.partition))
    for p in decisions.prewarm:
        try:
            pool = config.pool(p.pool)
        except KeyError:
            continue
        out.append(PowerUp(tuple(pool.node_names[: p.count])))  # Slurm picks; we name candidates
    for rel in decisions.release:
        out.append(PowerDown(rel.node, rel.reason))
    return out


def expected_cost(lease: Lease, jobs: dict[int, Job]) -> int:
    minutes = max((jobs[j].time_limit_min or 60 for j in lease.job_ids if j in jobs), default=60)
    return cost_micros(lease.price_per_hour_micros, minutes * 60)


# --------------------------------------------------------------------------------------------------
# Doing: the only code with side effects
# --------------------------------------------------------------------------------------------------
@dataclass
class CycleReport:
    started_at: float = 0.0
    duration_s: float = 0.0
    actions: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    pending_jobs: int = 0
    eligible_jobs: int = 0
    decider: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at, "duration_s": round(self.duration_s, 4), "actions": self.actions,
            "errors": self.errors[-20:], "pending_jobs": self.pending_jobs, "eligible_jobs": self.eligible_jobs,
            "decider": self.decider,
        }


class Executor:
    """Applies actions one by one; a failed action is logged and counted, the rest still run."""

    def __init__(self, store, adapter, providers: dict[str, Provider], config: Config, metrics: Metrics,
                 snapshot: Snapshot | None = None, clock: Callable[[], float] = time.time):
        self.store = store
        self.adapter = adapter
        self.providers = providers
        self.config = config
        self.metrics = metrics
        self.snapshot = snapshot
        self.clock = clock
        self.again = False  # something changed that the next cycle should look at right away
        self.report: CycleReport | None = None
        self.hook_started: dict[str, float] = {}
        self.health = None  # PoolHealth: launch failures and boot failures per pool
        self.failed_jobs: dict[int, float] = {}  # job id -> when a lease it asked for failed (held jobs to release)
        self._gangs_tried: set[str] = set()  # gangs launched (or tried) by this executor

    def apply(self, actions: Iterable[Action]) -> None:
        for action in actions:
            name = type(action).__name__
            try:
                getattr(self, f"_do_{name}")(action)
                self.metrics.actions.labels(name).inc()
                if self.report is not None:
                    self.report.actions[name] = self.report.actions.get(name, 0) + 1
            except Exception as exc:  # one bad action must not stop the cycle
                self.metrics.error(exc)
                if self.report is not None:
                    self.report.errors.append(f"{name}: {exc}")
                log.error("action failed", exc_info=not isinstance(exc, (ProviderError, SlurmError, IllegalTransition)),
                          extra=ev(action=name, lease_id=getattr(action, "lease_id", None),
                                   node=getattr(action, "node", None), error=str(exc),
                                   error_class=type(exc).__name__))

    # --- lease moves ------------------------------------------------------------------------
    def _move(self, lease_id: str, state: LeaseState, reason: str, **fields) -> Lease:
        lease = self.store.transition(lease_id, state, reason=reason, **fields)
        log.info(f"lease {state.value.lower()}", extra=ev(lease_id=lease_id, node=lease.node_name, pool=lease.pool,
                                                         state=state.value, reason=reason,
                                                         job_id=lease.job_ids[0] if lease.job_ids else None,
                                                         instance_id=lease.instance_id or None))
        return lease

    def _do_Launch(self, a: Launch) -> None:
        """Launch the lease's VM, or, for a gang, every member's VM in one all-or-nothing call."""
        lease = self.store.lease(a.lease_id)
        if lease.gang is None:
            members = [lease]
        elif lease.gang in self._gangs_tried:
            return  # one call per gang and cycle: the other members' Launch actions are the same call
        else:
            self._gangs_tried.add(lease.gang)
            members = self.store.leases(states=(S.REQUESTED, S.LAUNCHING), gang=lease.gang)
        members = [m for m in members if m.state in (S.REQUESTED, S.LAUNCHING)]
        if not members:
            return
        crash_point("launch.before_launching")
        members = [self._move(m.lease_id, S.LAUNCHING, "launch requested from the provider")
                   if m.state == S.REQUESTED else m for m in members]
        head = members[0]
        provider = self.providers[head.pool]
        crash_point("launch.before_provider")
        now = self.clock()
        for m in members:
            hook_t0 = self.hook_started.pop(m.lease_id, None)
            if hook_t0 is not None:
                self.metrics.resume_to_launch.observe(max(now - hook_t0, 0.0))
            log.info("provider launch call", extra=ev(
                lease_id=m.lease_id, node=m.node_name, pool=m.pool, gang=m.gang,
                since_request_s=round(now - m.created_at, 4),
                since_hook_s=None if hook_t0 is None else round(now - hook_t0, 4),
                job_id=m.job_ids[0] if m.job_ids else None))
        requests = [LaunchRequest(m.lease_id, m.node_name, m.pool, m.market) for m in members]
        try:
            if head.gang is None:
                instances = [provider.launch(requests[0])]
            else:
                instances = launch_all_or_nothing(provider, head.gang, requests)
        except ProviderError as exc:
            self.metrics.error(f"provider_{exc.kind}")
            if exc.kind in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT):
                log.warning("launch will be retried", extra=ev(lease_id=head.lease_id, node=head.node_name,
                                                                  gang=head.gang, error=str(exc),
                                                                  error_class=str(exc.kind)))
                return
            # capacity (every offering exhausted), quota or config: the pool takes no new jobs for a while
            # and the jobs that asked for these nodes go back on-prem
            reason = f"launch failed ({exc.kind}): {exc}"
            self._health("record_launch_failure", head.pool, str(exc), str(exc.kind))
            for m in members:
                self._do_Fail(Fail(m.lease_id, reason, requeue=m.job_ids))
                self._send_on_prem(m)
            return
        crash_point("launch.after_provider")
        self._health("record_launch_success", head.pool)
        for m, inst in zip(members, instances):
            self.metrics.launch_latency.observe(max(self.clock() - m.created_at, 0.0))
            self._move(m.lease_id, S.BOOTING, f"instance {inst.instance_id} launched",
                       instance_id=inst.instance_id, launched_at=inst.launched_at)
        crash_point("launch.after_booting")
        self.again = True

    def _do_Adopt(self, a: Adopt) -> None:
        self._move(a.lease_id, S.BOOTING, f"instance {a.instance_id} found in the listing",
                   instance_id=a.instance_id, launched_at=a.launched_at)
        self.again = True

    def _do_Refuse(self, a: Refuse) -> None:
        lease = self._move(a.lease_id, S.REFUSED, a.reason, ended_at=self.clock())
        if a.power_down:
            self._slurm_power_down(lease.node_name, f"burstd refused: {a.reason}", force=True)
            # keep Slurm from scheduling the job onto the pool again at once
            self._send_on_prem(lease)

    def _send_on_prem(self, lease: Lease) -> None:
        """Remove the lease's cloud partition from the jobs that asked for its node (Slurm checks that another
        partition is left; a job that has only the cloud partition keeps it)."""
        part = self._partition_of(lease.pool)
        if not part:
            return
        job_ids = dict.fromkeys(lease.job_ids)
        if self.snapshot is not None:
            for job in self.snapshot.jobs:
                try:
                    if job.nodes and lease.node_name in expand(job.nodes, validate=True):
                        job_ids[job.job_id] = None
                except HostlistError:
                    continue
        for job_id in job_ids:
            self.failed_jobs[job_id] = self.clock()
            self._quiet(self.adapter.remove_partition, job_id, part)

    def _health(self, method: str, *args) -> None:
        if self.health is None:
            return
        try:
            getattr(self.health, method)(*args)
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not undo the action
            log.error("pool health not recorded", extra=ev(call=method, error=str(exc)))

    def _do_MarkReady(self, a: MarkReady) -> None:
        crash_point("ready.before")
        lease = self._move(a.lease_id, S.READY, "slurmd registered", ready_at=self.clock())
        self._health("record_boot_success", lease.pool)
        self.metrics.ready_latency.observe(max(self.clock() - lease.created_at, 0.0))

    def _do_Fail(self, a: Fail) -> None:
        lease = self.store.lease(a.lease_id)
        if S.FAILED not in _allowed(lease.state):
            return
        self._move(a.lease_id, S.FAILED, a.reason)
        if lease.state == S.BOOTING:
            self._health("record_boot_failure", lease.pool, a.reason)
        if a.power_down:
            self._slurm_power_down(lease.node_name, f"burstd: {a.reason}", force=True)
        for job_id in a.requeue:
            self.failed_jobs[job_id] = self.clock()
            self._quiet(self.adapter.requeue, job_id)
        self.again = True

    def _do_Drain(self, a: Drain) -> None:
        lease = self._move(a.lease_id, S.DRAINING, a.reason)
        node = self.snapshot.node(lease.node_name) if self.snapshot is not None else None
        if node is not None and node_drained(node) and parse_preemption_reason(node.reason) is not None:
            return  # the agent drained it with the notice in the reason: keep that (the cycle reads it back)
        self._quiet(self.adapter.drain, [lease.node_name], a.reason[:200])

    def _do_Undrain(self, a: Undrain) -> None:
        self._move(a.lease_id, S.READY, "node undrained in Slurm")

    def _do_Terminate(self, a: Terminate) -> None:
        lease = self.store.lease(a.lease_id)
        if lease.state in FINAL_STATES:
            return
        if lease.state != S.TERMINATING:
            lease = self._move(a.lease_id, S.TERMINATING, a.reason)
            self.again = True  # the next cycle closes it as soon as the listing shows the VM gone
        ids = list(a.instance_ids) or ([lease.instance_id] if lease.instance_id else [])
        crash_point("terminate.before_provider")
        if ids:
            self.providers[lease.pool].terminate(ids)
        crash_point("terminate.after_provider")

    def _do_Close(self, a: Close) -> None:
        self._move(a.lease_id, S.TERMINATED, a.reason, ended_at=self.clock())
        self.again = True  # the node may be waiting (POWERING_UP) for its next lease

    def _do_TerminateOrphan(self, a: TerminateOrphan) -> None:
        log.warning("terminating orphan instance", extra=ev(pool=a.pool, instance_id=a.instance_id,
                                                             lease_id=a.lease_id or None, reason=a.reason))
        crash_point("orphan.before_terminate")
        self.providers[a.pool].terminate([a.instance_id])

    def _do_CreateLease(self, a: CreateLease) -> None:
        pool = self.config.pool(a.pool)
        job = self._job(a.job_ids[0]) if a.job_ids else None
        lease = self.store.create_lease(
            pool=pool.name, node_name=a.node, market=pool.market,
            price_per_hour_micros=usd_to_micros(pool.price_per_hour), job_ids=a.job_ids,
            account=job.account if job else "", reason=a.reason,
        )
        log.info("lease requested", extra=ev(lease_id=lease.lease_id, node=a.node, reason=a.reason))
        self.again = True

    # --- Slurm ------------------------------------------------------------------------------
    def _do_PowerDown(self, a: PowerDown) -> None:
        self._slurm_power_down(a.node, a.reason, force=a.force)

    def _do_PowerUp(self, a: PowerUp) -> None:
        self.adapter.power_up(list(a.nodes))

    def _do_ReturnToService(self, a: ReturnToService) -> None:
        self.adapter.resume([a.node])
        log.info("node returned to service", extra=ev(node=a.node, reason=f"was DOWN: {a.reason}"))

    def _do_AddPartition(self, a: AddPartition) -> None:
        self.adapter.add_partition(a.job_id, a.partition)
        log.info("job made burst-eligible", extra=ev(job_id=a.job_id, partition=a.partition))

    def _do_ReleaseJob(self, a: ReleaseJob) -> None:
        release = getattr(self.adapter, "release_hold", None)
        if release is None:
            return
        self._quiet(release, a.job_id)
        log.info("held job released (its cloud node failed to launch)", extra=ev(job_id=a.job_id))

    def _do_RemovePartition(self, a: RemovePartition) -> None:
        self.adapter.remove_partition(a.job_id, a.partition)
        log.info("job burst eligibility revoked", extra=ev(job_id=a.job_id, partition=a.partition))

    # --- helpers ----------------------------------------------------------------------------
    def _slurm_power_down(self, node: str, reason: str, force: bool) -> None:
        self._quiet(self.adapter.power_down, [node], force=force, reason=reason[:200])

    def _quiet(self, fn, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except SlurmError as exc:  # e.g. requeue of a job Slurm already requeued
            log.info("slurm call had no effect", extra=ev(call=getattr(fn, "__name__", str(fn)), error=str(exc)))

    def _partition_of(self, pool: str) -> str:
        try:
            return self.config.pool(pool).partition
        except KeyError:
            return ""

    def _job(self, job_id: int) -> Job | None:
        if self.snapshot is None:
            return None
        for job in self.snapshot.jobs:
            if job.job_id == job_id:
                return job
        return None


def _allowed(state: LeaseState) -> frozenset[LeaseState]:
    from burstd.domain.lease import ALLOWED

    return ALLOWED[state]


# --------------------------------------------------------------------------------------------------
# The reconciler: one cycle, plus the fast entry points the API calls
# --------------------------------------------------------------------------------------------------
class UnknownNode(ValueError):
    pass


#: How long the daemon reuses a pool's spot price history answer.
SPOT_PRICE_TTL_S = 300.0


class _CachedSpotHistory:
    """Just ``describe_spot_price_history`` of an EC2 client, each pool's answer reused for SPOT_PRICE_TTL_S."""

    def __init__(self, ec2, cache: dict, key: str, clock: Callable[[], float]):
        self._ec2, self._cache, self._key, self._clock = ec2, cache, key, clock

    def describe_spot_price_history(self, **kwargs):
        now = self._clock()
        hit = self._cache.get(self._key)
        if hit is not None and now - hit[0] < SPOT_PRICE_TTL_S:
            return hit[1]
        resp = self._ec2.describe_spot_price_history(**kwargs)
        self._cache[self._key] = (now, resp)
        return resp


Decider = Callable[..., Decisions]


class Reconciler:
    def __init__(self, config: Config, store, adapter, providers: dict[str, Provider], decider: Decider,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time, decider_name: str = "",
                 health=None):
        self.config = config
        self.store = store
        self.adapter = adapter
        self.providers = providers
        self.decider = decider
        self.decider_name = decider_name or getattr(decider, "__name__", "decide")
        self.metrics = metrics or Metrics()
        self.clock = clock
        self._intents: list[Intent] = self._load_intents()  # requests queued before a restart
        self.hook_started: dict[str, float] = {}  # lease id -> when its ResumeProgram started (in memory only)
        self._lock = threading.Lock()  # lease creation and the intent queue
        self.last_snapshot: Snapshot | None = None
        self.last_decisions: Decisions | None = None
        self.last_report: CycleReport | None = None
        self.failed_jobs: dict[int, float] = {}
        self._spot_cache: dict[str, tuple[float, Any]] = {}
        if health is None:
            from burstd.daemon.pools import PoolHealth

            health = PoolHealth(store, config, clock)
        self.health = health
        self.on_wake: Callable[[], None] = lambda: None
        from burstd.daemon.spend import SpendAccrual

        self.spend = SpendAccrual(store, config.budget.accrual_interval_s)
        try:
            from burstd.policy.prices import price_table

            self.price_source: Callable[[Config], dict] | None = (
                lambda cfg: price_table(cfg, aws_client=self._aws_price_client).quotes)
        except ImportError:
            self.price_source = None

    def _aws_price_client(self, pool) -> Any:
        """The pool's boto3 EC2 client (from its AWS provider) for spot price history, its answers kept for
        ``SPOT_PRICE_TTL_S`` so a 2 s cycle does not call DescribeSpotPriceHistory every time. A pool
        without one (not AWS, or a fake) raises, and ``price_table`` keeps the configured price."""
        ec2 = getattr(self.providers.get(pool.name), "ec2", None)
        if ec2 is None:
            raise LookupError(f"pool {pool.name} has no EC2 client")
        return _CachedSpotHistory(ec2, self._spot_cache, pool.name, self.clock)

    # --- called from the API (fast: record, wake, return) ---------------------------------------
    def check_nodes(self, nodes: Sequence[str]) -> None:
        unknown = [n for n in nodes if self.config.pool_of_node(n) is None]
        if unknown:
            raise UnknownNode(
                f"unknown node(s) {', '.join(unknown[:10])}: not in any pool "
                f"({', '.join(f'{p.node_prefix}[1-{p.node_count}]' for p in self.config.pools) or 'no pools'})"
            )

    def request_resume(self, nodes: Sequence[str], jobs: dict[str, tuple[int, ...]] | None = None,
                       hook_t0: float | None = None) -> dict:
        """ResumeProgram: one REQUESTED lease per node without an open one; committed before return.

        A node whose previous lease is still FAILED/TERMINATING (its old VM being cleaned up) is
        ``deferred``: the store keeps one open lease per node, and the cycle records the new lease from
        Slurm's POWERING_UP state as soon as the old one closes.
        """
        self.check_nodes(nodes)
        jobs = jobs or {}
        created, existing, deferred = [], [], []
        with self._lock:
            fresh = []
            for node in nodes:
                current = self.store.lease_for_node(node)
                if current is None:
                    fresh.append(node)
                else:
                    (existing if current.state in ACTIVE_STATES else deferred).append(current.lease_id)
            pools = {p.name: p for p in self.config.pools}
            leaders = plan_gangs(fresh, jobs, lambda n: getattr(self.config.pool_of_node(n), "name", None),
                                 lambda name: pools[name].all_or_nothing)
            gang_ids = {leader: uuid.uuid4().hex for leader in set(leaders.values())}  # the leader's lease id
            for node in fresh:
                pool = self.config.pool_of_node(node)
                job_ids = tuple(jobs.get(node, ()))
                gang = gang_ids.get(leaders.get(node, ""))
                lease = self.store.create_lease(
                    pool=pool.name, node_name=node, market=pool.market,
                    price_per_hour_micros=usd_to_micros(pool.price_per_hour), job_ids=job_ids,
                    account=self._account_of(job_ids), reason="ResumeProgram", gang=gang,
                    lease_id=gang if gang is not None and leaders[node] == node else None,
                )
                crash_point("resume.after_commit")
                if hook_t0 is not None:
                    self.hook_started[lease.lease_id] = hook_t0
                log.info("lease requested", extra=ev(lease_id=lease.lease_id, node=node, pool=pool.name, gang=gang,
                                                     job_id=job_ids[0] if job_ids else None))
                created.append(lease.lease_id)
        self.wake()
        return {"created": created, "existing": existing, "deferred": deferred}

    def add_intent(self, kind: str, nodes: Sequence[str], reason: str = "") -> None:
        """Queue a request for the next cycle, durably: it is in the store before this returns, so a daemon
        killed before the cycle still drains/terminates after its restart (the cycle applies it and then
        forgets it; applying one twice is harmless)."""
        self.check_nodes(nodes)
        now = self.clock()
        with self._lock:
            queued = [*self._intents, *(Intent(kind, n, reason, now) for n in nodes)]
            self._save_intents(queued)  # raises: the caller (the API) answers an error, nothing is queued
            self._intents = queued
        self.wake()

    def _save_intents(self, intents: Sequence[Intent]) -> None:
        import json

        self.store.set_setting(INTENTS_SETTING, json.dumps([dataclasses.asdict(i) for i in intents]))

    def _load_intents(self) -> list[Intent]:
        import json

        try:
            raw = self.store.get_setting(INTENTS_SETTING)
        except Exception as exc:  # noqa: BLE001 - a store without settings (unit-test fakes)
            log.warning("queued requests not restored", extra=ev(error=str(exc)))
            return []
        try:
            return [Intent(str(d["kind"]), str(d["node"]), str(d.get("reason", "")), float(d.get("at", 0.0)))
                    for d in json.loads(raw or "[]")]
        except (ValueError, TypeError, KeyError) as exc:
            log.error("queued requests unreadable; dropped", extra=ev(setting=INTENTS_SETTING, error=str(exc)))
            return []

    def wake(self) -> None:
        self.on_wake()

    def paused(self) -> bool:
        try:
            value = self.store.get_setting("paused")
        except Exception:  # noqa: BLE001 - a settings read must not stop the loop
            value = None
        if value is None:
            return self.config.policy.paused
        return str(value).lower() in ("1", "true", "yes")

    def _account_of(self, job_ids: Sequence[int]) -> str:
        snap = self.last_snapshot
        if snap is None or not job_ids:
            return ""
        for job in snap.jobs:
            if job.job_id in job_ids:
                return job.account
        return ""

    # --- the cycle ----------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        report = CycleReport(started_at=self.clock(), decider=self.decider_name)
        ex = Executor(self.store, self.adapter, self.providers, self.config, self.metrics, self.last_snapshot,
                      self.clock)
        ex.report = report
        ex.hook_started = self.hook_started
        ex.health = self.health
        now = self.clock()
        for job_id in [j for j, t in self.failed_jobs.items() if now - t > 3600]:
            del self.failed_jobs[job_id]
        ex.failed_jobs = self.failed_jobs
        paused = self.paused()

        # 1. launches first: a resume call becomes a provider call without waiting for Slurm reads
        with self._lock:  # a resume call records a gang's leases under this lock: see all of them or none
            leases = self.store.leases(states=OPEN_STATES)
        ex.apply(plan_launches(leases, paused=paused, refusal=self._refusal_fn(leases)))

        # 2. read the world once
        observed_at = self.clock()
        snapshot = None
        try:
            snapshot = self.adapter.snapshot()
        except Exception as exc:  # noqa: BLE001
            self.metrics.error(exc)
            report.errors.append(f"snapshot: {exc}")
            log.error("slurm snapshot failed", extra=ev(error=str(exc), error_class=type(exc).__name__))
        listings: dict[str, tuple[Instance, ...]] = {}
        for name, provider in self.providers.items():
            try:
                listings[name] = tuple(provider.list_instances())
            except Exception as exc:  # noqa: BLE001
                self.metrics.error(exc)
                report.errors.append(f"list_instances({name}): {exc}")
                log.error("provider listing failed", extra=ev(pool=name, error=str(exc),
                                                             error_class=type(exc).__name__))
        crash_point("cycle.after_snapshot")
        if snapshot is not None:
            self.last_snapshot = snapshot
            ex.snapshot = snapshot

        # 3. hook / agent / admin intents (kept in the store until applied)
        with self._lock:
            intents = list(self._intents)
        leases = self.store.leases(states=OPEN_STATES)
        # plus the notices the agent left in Slurm node reasons (not queued: read again every cycle)
        ex.apply(plan_intents([*intents, *plan_node_notices(leases, snapshot)], leases, snapshot))
        crash_point("cycle.after_intents")
        if intents:
            with self._lock:
                rest = self._intents[len(intents):]  # requests that arrived while these were applied
                try:
                    self._save_intents(rest)
                    self._intents = rest
                except Exception as exc:  # noqa: BLE001 - applied again next cycle: harmless
                    report.errors.append(f"intents: {exc}")

        # 4. leases vs Slurm vs provider, and orphans
        leases = tuple(self.store.leases(states=OPEN_STATES))
        world = World(self.clock(), observed_at, snapshot, listings, leases)
        with self._lock:  # CreateLease must not race a resume call for the same node
            ex.apply(plan_leases(world, self.config))
        ex.apply(plan_orphans(world, self.config))

        # 5. decide which jobs may burst, and do it
        if snapshot is not None:
            # pools that cannot launch now send their pending jobs on-prem; held failed launches run again
            blocked = self._blocked()
            ex.apply(plan_blocked(snapshot, blocked, self.config))
            ex.apply(plan_held(snapshot, self.failed_jobs))
            cfg = self.config if not paused or self.config.policy.paused else self.config.model_copy(
                update={"policy": self.config.policy.model_copy(update={"paused": True})})
            try:
                decisions = self.decider(snapshot, list(self.store.leases(states=OPEN_STATES)),
                                         self._budget_book(), self._prices(), cfg, self.clock())
                self.last_decisions = decisions
                ex.apply(plan_decisions(decisions, self.config, blocked))
            except Exception as exc:  # noqa: BLE001
                self.metrics.error(exc)
                report.errors.append(f"decide: {exc}")
                log.error("decide failed", exc_info=True, extra=ev(error_class=type(exc).__name__))
            self._pressure(snapshot, report)

        # 6. a new REQUESTED lease from drift repair launches in this same cycle
        with self._lock:
            leases = self.store.leases(states=OPEN_STATES)
        if any(lease.state == S.REQUESTED for lease in leases):
            ex.apply(plan_launches(leases, paused=paused, refusal=self._refusal_fn(leases)))

        self._lease_metrics()
        # 7. the spend ledger: allocations from this snapshot, spend of every lease up to now
        try:
            self.spend.run(snapshot, observed_at)
        except Exception as exc:  # noqa: BLE001
            self.metrics.error(exc)
            report.errors.append(f"spend: {exc}")
            log.error("spend accrual failed", extra=ev(error=str(exc), error_class=type(exc).__name__))
        report.duration_s = time.perf_counter() - t0
        self.metrics.cycle_seconds.observe(report.duration_s)
        self.last_report = report
        if report.actions:
            log.info("cycle", extra=ev(duration_s=round(report.duration_s, 4), actions=report.actions,
                                       errors=len(report.errors)))
        if ex.again:
            self.wake()
        return report

    # --- inputs for the guard and the decider -------------------------------------------------
    def budget_book(self) -> BudgetBook | None:
        """The budget book as the decider sees it (also for ``/v1/explain``)."""
        return self._budget_book()

    def prices(self) -> dict:
        """This cycle's validated price quotes (also for ``/v1/explain``)."""
        return self._prices()

    def _budget_book(self) -> BudgetBook | None:
        fn = getattr(self.store, "budget_book", None)
        if fn is None:
            return None
        try:
            return fn(self.config.budget.period, self.clock(), self.config)
        except NotImplementedError:
            return None

    def _prices(self) -> dict:
        """This cycle's price quotes: ``self.price_source(config)`` (default: the configured prices through
        ``burstd.policy.prices.price_table``), each checked by ``validate_quote``. A NaN, infinite or negative
        price raises ``PriceError`` naming the pool: the decider is not run and launches are refused."""
        if self.price_source is None:
            from burstd.domain.budget import PriceQuote

            return {(p.name, p.market): PriceQuote(p.name, p.market, usd_to_micros(p.price_per_hour))
                    for p in self.config.pools}
        quotes = dict(self.price_source(self.config))
        from burstd.policy.budget import validate_quote

        for q in quotes.values():
            validate_quote(q)
        return quotes

    def _blocked(self) -> dict[str, str]:
        try:
            return self.health.blocked()
        except Exception as exc:  # noqa: BLE001
            log.error("pool health unreadable", extra=ev(error=str(exc)))
            return {}

    def _refusal_fn(self, leases: Sequence[Lease]) -> Callable[[Lease], str | None]:
        """The budget guard for this pass: ``burstd.policy.budget.guard_launch`` when the policy package
        and a budget book are there, else the simple rule in ``burstd.daemon.rules``. Leases approved in
        this pass count as committed for the next ones."""
        jobs = {j.job_id: j for j in (self.last_snapshot.jobs if self.last_snapshot else ())}
        live = [lease for lease in leases if lease.is_live]
        state: dict[str, Any] = {}

        def refusal(lease: Lease) -> str | None:
            if "blocked" not in state:
                state["blocked"] = self._blocked()
            if lease.pool in state["blocked"]:
                return state["blocked"][lease.pool]
            if "book" not in state:
                state["book"] = self._budget_book()
            book = state["book"]
            try:
                from burstd.policy.budget import guard_launch, launch_seconds
            except ImportError:
                guard_launch = None
            try:
                prices = state["prices"] if "prices" in state else state.setdefault("prices", self._prices())
            except ValueError as exc:  # PriceError: a NaN/negative price from the price source: no launch
                log.error("price refused", extra=ev(lease_id=lease.lease_id, pool=lease.pool, error=str(exc)))
                return f"no valid price for pool {lease.pool}: {exc}"
            if guard_launch is not None and book is not None:
                limit_min = max((jobs[j].time_limit_min or 60 for j in lease.job_ids if j in jobs), default=60)
                verdict = guard_launch(book, live, jobs.values(), account=lease.account,
                                       price_per_hour_micros=lease.price_per_hour_micros, nodes=1,
                                       seconds=launch_seconds(limit_min * 60.0, self.config), now=self.clock(),
                                       config=self.config, prices=prices)
                why = None if verdict.ok else verdict.reason
            else:
                committed: dict[str, int] = {}
                for other in live:
                    c = expected_cost(other, jobs)
                    committed[other.account] = committed.get(other.account, 0) + c
                    committed[""] = committed.get("", 0) + c
                why = launch_refusal(lease.account, expected_cost(lease, jobs), book, committed, self.config)
            if why is None:
                live.append(dataclasses.replace(lease, state=S.LAUNCHING))
            return why

        return refusal

    def _pressure(self, snapshot: Snapshot, report: CycleReport) -> None:
        clouds = {p.partition for p in self.config.pools}
        jobs: dict[str, int] = {}
        hours: dict[str, float] = {}
        eligible = 0
        for job in snapshot.pending:
            for part in job.partitions:
                jobs[part] = jobs.get(part, 0) + 1
                hours[part] = hours.get(part, 0.0) + (job.time_limit_min or 60) / 60 * job.node_count
            if set(job.partitions) & clouds:
                eligible += 1
        report.pending_jobs = len(snapshot.pending)
        report.eligible_jobs = eligible
        self.metrics.set_pressure(jobs, hours, eligible)

    def _lease_metrics(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for lease in self.store.leases(states=OPEN_STATES):
            counts[(lease.state.value, lease.pool)] = counts.get((lease.state.value, lease.pool), 0) + 1
        self.metrics.set_leases(counts)
