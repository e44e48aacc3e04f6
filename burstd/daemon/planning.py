"""Pure planning: the world one cycle sees, and the decision tables that turn it into actions.

    world = World(now, observed_at, snapshot, listings, leases)
    actions = plan_launches(...) + plan_intents(...) + plan_leases(world, cfg) + plan_orphans(world, cfg)

Each (lease state, Slurm node, VM) combination maps to a small frozen action (``daemon.actions``), so the
table is tested on its own; nothing here touches the store, Slurm or a cloud. Where a launch is decided:
``plan_launches``; where leases time out, are adopted, fail or close: ``plan_leases`` (invariants 1-3, 6).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from burstd.config import Config
from burstd.daemon.actions import (
    LAUNCH_FAILED_HELD, OWN_REASON, RESUME_TIMEOUT_REASON, Action, AddPartition, Adopt, BootReplacement, ClearReason,
    Close,
    CreateLease, Drain, Fail, Intent, Launch, MarkReady, PowerDown, PowerUp, Refuse, ReleaseJob, RemovePartition, Requeue,
    ReturnToService, SetJobMarket, Terminate, TerminateOrphan, Undrain, own_reason,
)
from burstd.daemon.requeue_record import REQUEUE
from burstd.domain.budget import Allocation
from burstd.domain.decisions import Decisions
from burstd.domain.lease import FINAL_STATES, Lease, LeaseState, may_own_instance
from burstd.domain.preemption import Notice, parse_preemption_reason
from burstd.domain.slurm import Node, Snapshot
from burstd.providers.base import Instance
from burstd.providers.orphans import find_orphans

S = LeaseState

#: A lease that changed less than this before the world was observed is not judged on that world.
FRESH_S = 2.0
#: How long a cloud node may be seen powering up with no lease before drift repair records one: Slurm marks it
#: POWERING_UP before its ResumeProgram call reaches the daemon, and a lease recorded in that gap would miss the
#: call's gang (a multi-node job launched node by node, not all or nothing).
UNLEASED_GRACE_S = 5.0
#: How far a provider's launch time may sit before the lease's creation (clock skew between cloud and head).
LAUNCH_SKEW_S = 300.0


def sane_launch_time(reported: float, created_at: float, now: float) -> float:
    """The launch time to bill from: the provider's, kept within [created - skew, now]. A VM cannot start long
    before burstd asked for it, nor in the future; a bogus time would bill months (and write a row an hour)."""
    if reported != reported:  # NaN
        return now
    return min(max(reported, created_at - LAUNCH_SKEW_S), max(now, created_at))


@dataclass(frozen=True)
class World:
    now: float
    observed_at: float  # when the snapshot and listings were taken
    snapshot: Snapshot | None
    listings: dict[str, tuple[Instance, ...]]  # pool -> instances; a pool missing = its listing failed
    leases: tuple[Lease, ...]  # every lease in an OPEN state
    # cloud node -> since when it has been seen powering up with no open lease (``unleased_since``); None: no
    # record, so drift repair does not wait (a one-off plan)
    unleased: Mapping[str, float] | None = None

    def unleased_for(self, node: str) -> float:
        if self.unleased is None:
            return float("inf")
        return self.now - self.unleased.get(node, self.now)

    def instance_of(self, lease: Lease) -> Instance | None:
        for inst in self.listings.get(lease.pool, ()):
            if inst.lease_id == lease.lease_id or (lease.instance_id and inst.instance_id == lease.instance_id):
                if not inst.is_gone:
                    return inst
        return None

    def reclaimed(self, lease: Lease) -> bool:
        """The provider lists the lease's instance as reclaimed (a spot preemption), not merely missing."""
        return any(inst.lease_id == lease.lease_id and (inst.preempted or inst.state == "preempted")
                   for inst in self.listings.get(lease.pool, ()))

    def listed(self, pool: str) -> bool:
        return pool in self.listings

    def fresh(self, lease: Lease) -> bool:
        """Changed too recently for this world to judge it (the world may predate the change)."""
        return lease.state_since > self.observed_at - FRESH_S



def jobs_on_node(snapshot: Snapshot | None, node: str) -> tuple[int, ...]:
    """The running jobs on ``node`` in this snapshot (the jobs a failure of its VM interrupts)."""
    if snapshot is None:
        return ()
    return tuple(job.job_id for job in snapshot.jobs_on(node) if job.is_running)


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


def plan_node_notices(leases: Sequence[Lease], snapshot: Snapshot | None,
                      confirmed: Callable[[Lease], bool] = lambda lease: False) -> list[Intent]:
    """Server-side preemption notices: a READY lease whose node carries a ``burstd-preempt`` reason gets the same
    "notice" intent an agent report (POST /v1/notices) makes, so ``plan_intents`` drains it the same way, but
    only when ``confirmed(lease)`` (the provider lists the lease's VM as reclaimed or going). A Slurm reason is a
    hint, never proof: root on any cloud node holds the munge key and may write any node's reason (issue 21
    item 6); the agent's own notice comes with its node-bound credential and needs no hint. Read from Slurm every
    cycle, so nothing is lost across a daemon restart; a DRAINING lease gets nothing (repeated cycles repeat
    nothing). The deadline is judged in ``plan_leases``, from the lease's own recorded notice."""
    if snapshot is None:
        return []
    out: list[Intent] = []
    for lease in leases:
        if lease.state != S.READY:
            continue
        node = snapshot.node(lease.node_name)
        notice = node_notice(node, lease)
        if node is not None and notice is not None and confirmed(lease):
            out.append(Intent("notice", lease.node_name,
                              notice_reason("spot-interruption", notice.deadline, f"Slurm reason {node.reason}"),
                              snapshot.taken_at))
    return out


def unconfirmed_notices(leases: Sequence[Lease], snapshot: Snapshot | None,
                        confirmed: Callable[[Lease], bool]) -> list[str]:
    """The READY leases' nodes whose ``burstd-preempt`` reason nothing confirms (for a warning: a forged reason,
    or an agent whose report has not arrived yet)."""
    if snapshot is None:
        return []
    return [lease.node_name for lease in leases if lease.state == S.READY
            and node_notice(snapshot.node(lease.node_name), lease) is not None and not confirmed(lease)]


def provider_confirms_notice(listings: Mapping[str, Sequence[Instance]]) -> Callable[[Lease], bool]:
    """``plan_node_notices``'s confirmation from the provider's own listing: the lease's VM is listed as
    reclaimed, or on its way out (stopping, shutting down, preempted, terminated)."""
    def confirmed(lease: Lease) -> bool:
        return any((inst.lease_id == lease.lease_id or (lease.instance_id and inst.instance_id == lease.instance_id))
                   and (inst.preempted or inst.state in GOING_STATES)
                   for inst in listings.get(lease.pool, ()))
    return confirmed


#: Provider states of a VM on its way out: what confirms a preemption hint.
GOING_STATES = frozenset({"stopping", "shutting-down", "preempted", "terminated"})
_RECORDED_DEADLINE = re.compile(r"^[a-z][a-z-]{0,39} deadline (\d{1,12})(?::|$)")


def recorded_deadline(lease: Lease) -> float | None:
    """The deadline of the notice that drained this lease, as ``notice_reason`` recorded it (from the agent's
    authenticated report or a confirmed hint); None for any other drain (an admin's)."""
    if lease.state != S.DRAINING:
        return None
    m = _RECORDED_DEADLINE.match(lease.reason or "")
    return float(m.group(1)) if m else None


def node_registered(node: Node | None) -> bool:
    """slurmd on the node has registered: it left POWERING_UP and responds."""
    if node is None:
        return False
    if node.is_powering_up or node.is_powered_down or node.has("NOT_RESPONDING") or node.has("POWERING_DOWN"):
        return False
    return node.state not in ("DOWN", "UNKNOWN", "FUTURE")


def settled_idle(node: Node) -> bool:
    """Powered down, not on its way up or down, and in service (no DOWN, DRAIN or FAIL): a plain idle~ node."""
    return node.is_powered_down and node.state == "IDLE" and not {
        "POWERING_UP", "POWERING_DOWN", "POWER_DOWN", "DOWN", "DRAIN", "FAIL"} & set(node.flags)


def node_released(node: Node | None) -> bool:
    """Slurm considers the node off (powered down or going there) and is not bringing it up."""
    if node is None:
        return False
    return (node.is_powered_down or node.has("POWERING_DOWN") or node.has("POWER_DOWN")) and not node.is_powering_up


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


@dataclass(frozen=True)
class ResumeJob:
    """What Slurm's resume file says of one job beyond its nodes (26.05+: ``priority``, ``exclusive``; older
    releases leave them unknown)."""

    job_id: int
    priority: int | None = None
    exclusive: bool = False  # Slurm's ``exclusive`` is NODE, USER, MCS or TOPO (not NO): no other job on its nodes

    @classmethod
    def of(cls, job_id: int, priority: int | None = None, exclusive: str | None = None) -> ResumeJob:
        return cls(job_id, priority, (exclusive or "NO").strip().upper() not in ("NO", ""))


def node_job(job_ids: Sequence[int], info: Mapping[int, ResumeJob]) -> int | None:
    """The job a node is resumed for: the highest-priority one where Slurm says (26.05+), else the first listed."""
    if not job_ids:
        return None
    return max(job_ids, key=lambda j: (info[j].priority or 0) if j in info else 0)  # max keeps the first of ties


def plan_gangs(
    nodes: Sequence[str],
    jobs: dict[str, tuple[int, ...]],
    pool_of: Callable[[str], str | None],
    all_or_nothing: Callable[[str], bool],
    info: Mapping[int, ResumeJob] | None = None,
) -> dict[str, str]:
    """node -> the first node of its gang: the nodes Slurm resumes together for one multi-node job (Slurm's
    resume file maps jobs to nodes) in one pool, all-or-nothing. A node shared by several jobs goes with its
    highest-priority one (``info``, 26.05+; else its first); nodes whose job has no other node here (or no job)
    are in no gang. A pool without ``all_or_nothing`` launches nodes one by one, except for an exclusive job:
    its nodes serve no other job while it waits for the rest, so part of it up is money for nothing."""
    info = info or {}
    by_job: dict[tuple[int, str], list[str]] = {}
    for node in nodes:
        pool = pool_of(node)
        job = node_job(jobs.get(node, ()), info)
        if pool is None or job is None:
            continue
        if all_or_nothing(pool) or (job in info and info[job].exclusive):
            by_job.setdefault((job, pool), []).append(node)
    return {node: members[0] for members in by_job.values() if len(members) > 1 for node in members}


def resume_order(nodes: Sequence[str], jobs: dict[str, tuple[int, ...]], info: Mapping[int, ResumeJob]) -> list[str]:
    """The order to record one resume call's leases in: by the priority of each node's job, highest first (stable;
    nodes of one job stay together). Launches go oldest lease first and each one approved counts against the
    budget for the next, so when money runs short the higher-priority gang gets it. Without priorities (before
    26.05) Slurm's own order stays."""
    def key(node: str) -> int:
        job = node_job(jobs.get(node, ()), info)
        prio = info[job].priority if job is not None and job in info else None
        return -prio if prio is not None else 0
    return sorted(nodes, key=key)


def plan_intents(intents: Iterable[Intent], leases: Sequence[Lease], snapshot: Snapshot | None,
                 listings: Mapping[str, Sequence[Instance]] | None = None) -> list[Action]:
    """Hook, agent and admin requests -> actions on the node's current lease. A notice on a node that runs jobs
    also boots their next node now (``BootReplacement``; ``listings``, pool -> instances, names the offering the
    notice reclaims)."""
    by_node: dict[str, Lease] = {}
    for lease in sorted(leases, key=lambda x: x.created_at):
        by_node[lease.node_name] = lease  # newest open lease wins
    out: list[Action] = []
    draining: set[str] = set()
    spares: list[str] = []  # replacement nodes powered up by this pass (one each)
    for it in intents:
        if it.kind == REQUEUE:  # owed from before a restart: whatever state the lease is in now
            out.append(Requeue(it.node, it.reason))
            continue
        current = by_node.get(it.node)
        if current is None:
            continue
        lease, st = current, current.state
        if it.kind == "suspend":
            if st == S.REQUESTED:
                out.append(Refuse(lease.lease_id, "Slurm suspended the node before it launched", power_down=False))
            elif st not in (S.TERMINATING, S.FAILED):  # a FAILED lease is cleaned up by plan_leases, keeping why
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
        elif it.kind == "parity":
            # the node's parity gate refused it before slurmd started: a boot failure (it counts toward the pool's
            # protection), and the jobs it was started for go back to the queue with their priority
            if st in (S.LAUNCHING, S.BOOTING):
                requeue = tuple(dict.fromkeys(lease.job_ids + jobs_on_node(snapshot, it.node)))
                out.append(Fail(lease.lease_id, it.reason or "parity gate refused the node", requeue=requeue))
        elif it.kind in ("drain", "notice"):
            if st == S.READY and lease.lease_id not in draining:  # one drain, however many ways it was asked
                draining.add(lease.lease_id)
                # the jobs running when the notice arrived go on record with the drain (``Drain.jobs``)
                running = jobs_on_node(snapshot, it.node)
                out.append(Drain(lease.lease_id, it.reason or ("drained by admin" if it.kind == "drain" else "notice"),
                                 running))
                spare = replacement_node(snapshot, it.node, by_node, spares) if it.kind == "notice" and running else None
                if spare is not None:
                    spares.append(spare)
                    listed = (listings or {}).get(lease.pool, ())
                    offering = next((i.offering for i in listed if i.lease_id == lease.lease_id), None)
                    out.append(BootReplacement(lease.lease_id, spare, offering))
    return out


def replacement_node(snapshot: Snapshot | None, reclaimed: str, leased: Mapping[str, Lease],
                     taken: Iterable[str] = ()) -> str | None:
    """A node to boot now for the jobs of ``reclaimed`` (a notice came): powered down, idle, not drained, in a
    partition of the reclaimed node, with no open lease and not ``taken`` already; None when there is none."""
    if snapshot is None or (old := snapshot.node(reclaimed)) is None:
        return None
    busy = set(taken)
    for node in snapshot.nodes:
        if (node.name != reclaimed and node.name not in busy and set(node.partitions) & set(old.partitions)
                and node.is_powered_down and not node.is_powering_up and node.state == "IDLE"
                and not node.is_drained and "POWERING_DOWN" not in node.flags
                and (node.name not in leased or leased[node.name].state in FINAL_STATES)):
            return node.name
    return None


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
        # when the trouble began: a notice drained the lease (DRAINING since then), else about the last look at
        # the VM alive; jobs killed by the VM's end after that instant come back, jobs ended before do not
        since = lease.state_since if st == S.DRAINING else world.observed_at - 2 * d.cycle_interval_s

        if st == S.LAUNCHING:
            # The launch returned but its result was not recorded (crash): adopt a running instance. A
            # pending one may be a half-made launch: calling launch again (same token) completes or returns it.
            if inst is not None and inst.state == "running":
                out.append(Adopt(lease.lease_id, inst.instance_id, inst.launched_at))
            elif age > d.launch_timeout_s:
                out.append(Fail(lease.lease_id, f"launch timed out after {age:.0f}s", requeue=requeue, since=since))
            elif listed and not fresh:
                out.append(Launch(lease.lease_id, retry=True))
        elif st == S.BOOTING:
            if listed and inst is None and not fresh:
                out.append(Fail(lease.lease_id, "instance vanished while booting", requeue=requeue, since=since))
            elif node_registered(node):
                out.append(MarkReady(lease.lease_id))
            elif age > d.boot_timeout_s:
                out.append(Fail(lease.lease_id, f"slurmd did not register within {d.boot_timeout_s:.0f}s",
                                requeue=requeue, since=since))
                out.append(Terminate(lease.lease_id, "boot timeout", _ids(inst, lease)))
            elif snap is not None and node_released(node) and not fresh:
                out.append(Terminate(lease.lease_id, "Slurm powered the node down while it booted", _ids(inst, lease)))
        elif st in (S.READY, S.DRAINING):
            if listed and inst is None and not fresh:
                # a reclaim the provider reports is recorded as the preemption it is; only a VM gone
                # without a word (deleted outside burstd) is "vanished"
                why = ("preempted: the provider reclaimed the instance" if world.reclaimed(lease)
                       else "instance vanished (preempted or deleted outside burstd)")
                out.append(Fail(lease.lease_id, why, requeue=requeue, since=since))
            elif snap is not None and node_released(node) and not fresh:
                out.append(Terminate(lease.lease_id, "Slurm powered the node down", _ids(inst, lease)))
            elif (deadline := recorded_deadline(lease)) is not None and deadline <= world.now:
                # the cloud reclaims the VM now (or did): the same path as a vanished instance, and the VM too. The
                # deadline is the lease's own recorded notice, never a node reason read now (anyone with the munge
                # key may write one: issue 21 item 6)
                why = f"preempted: notice deadline {deadline:.0f} passed ({lease.reason})"
                out.append(Fail(lease.lease_id, why[:200], requeue=requeue, since=since))
                out.append(Terminate(lease.lease_id, "preempted (notice deadline passed)", _ids(inst, lease)))
            elif st == S.DRAINING and node is not None and not node.is_drained and node_registered(node) \
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
            if node.is_cloud and node.name not in covered and own_reason(node.reason) and settled_idle(node) and \
                    config.pool_of_node(node.name) is not None:
                # burstd's reason outlived the lease it was about (a reclaim's "burstd: preempted ..."): the node is
                # back in the pool, and a stale reason would read as a fault; an admin's reason is left alone
                out.append(ClearReason(node.name, node.reason))
            if node.is_cloud and node.is_powering_up and node.name not in covered and \
                    world.unleased_for(node.name) >= UNLEASED_GRACE_S:
                pool = config.pool_of_node(node.name)
                if pool is not None:
                    out.append(CreateLease(node.name, pool.name, "Slurm is powering the node up without a lease",
                                           jobs_on_node(snap, node.name)))
    return out


def unleased_since(snapshot: Snapshot | None, leases: Iterable[Lease], before: Mapping[str, float],
                   now: float) -> dict[str, float]:
    """Cloud node -> since when it is seen powering up with no open lease (``World.unleased``): ``before`` (the
    last cycle's answer) carried on for the nodes still so, ``now`` for the new ones."""
    if snapshot is None:
        return dict(before)
    covered = {lease.node_name for lease in leases}
    return {n.name: before.get(n.name, now) for n in snapshot.nodes
            if n.is_cloud and n.is_powering_up and n.name not in covered}


def _ids(inst: Instance | None, lease: Lease) -> tuple[str, ...]:
    if inst is not None:
        return (inst.instance_id,)
    return (lease.instance_id,) if lease.instance_id else ()


@dataclass(frozen=True)
class Sweep:
    """An admin's ``burstctl cloud gc``: collect the orphans of ``pool`` (None: every pool) with this grace."""

    pool: str | None
    grace_s: float


def plan_orphans(world: World, config: Config, sweeps: Sequence[Sweep] = ()) -> list[Action]:
    """Orphans (``providers.orphans.find_orphans``: the one rule) -> TerminateOrphan, once older than
    ``orphan_grace_s``, or than a sweep's grace for its pool. A pool whose listing failed is not judged."""
    out: list[Action] = []
    for pool, instances in world.listings.items():
        grace = min([config.daemon.orphan_grace_s, *(s.grace_s for s in sweeps if s.pool in (None, pool))])
        for o in find_orphans(instances, world.leases, now=world.now, grace_s=grace):
            out.append(TerminateOrphan(pool, o.instance.instance_id, o.instance.lease_id, o.reason))
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


def plan_decisions(decisions: Decisions, config: Config, blocked: dict[str, str] | None = None,
                   markets: Mapping[int, str] | None = None) -> list[Action]:
    """Slurm and lease intents from the policy's decisions. ``markets`` is what ``JobMarkets`` has recorded
    (job -> market other than its pool's): a job whose decided market differs gets a ``SetJobMarket`` before
    its partition is added, so the lease for its node launches in the market the policy chose."""
    out: list[Action] = []
    recorded = markets or {}
    blocked_parts = set()
    for name in blocked or {}:
        try:
            blocked_parts.add(config.pool(name).partition)
        except KeyError:
            continue
    chosen = dict(decisions.markets)
    for d in decisions.eligible:
        chosen.setdefault(d.job_id, (d.pool, d.market))
    for job_id, (pool_name, market) in chosen.items():
        try:
            want = None if market == config.pool(pool_name).market else market
        except KeyError:
            continue
        if recorded.get(job_id) != want:
            out.append(SetJobMarket(job_id, want))
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
        out.append(PowerDown(rel.node, OWN_REASON + rel.reason))
    return out


#: Ends a job can meet because its node went away: such a job, on the node when the trouble began, comes back.
ENDED_BY_THE_NODE = frozenset({"FAILED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})


def jobs_to_requeue(candidates: Iterable[int], states: dict[int, str | None], allocations: Iterable[Allocation],
                    since: float, elsewhere: Iterable[int] = ()) -> tuple[int, ...]:
    """Which of a failed lease's candidate jobs burstd requeues (pure).

    ``states``: each job's base state in Slurm now (None: Slurm has forgotten it); ``allocations``: the lease's
    record of which jobs held its node and when (``lease_allocation``). A job comes back when it is still live
    in Slurm (running or configuring on the lost node), or when it ended the way a lost node ends a job and it
    was on the node at ``since``. A job its user cancelled, one that completed or timed out, one that ended
    before ``since``, one that is pending anyway, one already running on another node (``elsewhere``: Slurm
    requeued it itself and it started again), and one Slurm no longer knows stay as they are: nobody pays for a
    job that is over, and a job is never sent back twice."""
    held = {a.job_id: a for a in allocations}
    moved = set(elsewhere)
    out = []
    for job_id in dict.fromkeys(candidates):
        state = states.get(job_id)
        if job_id in moved:
            continue
        if state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
            out.append(job_id)
        elif state in ENDED_BY_THE_NODE:
            alloc = held.get(job_id)
            if alloc is not None and alloc.start <= since and (alloc.end is None or alloc.end >= since):
                out.append(job_id)
    return tuple(out)
