"""The Executor: the only code of the cycle with side effects. It applies planned actions (``daemon.actions``)
to the store, Slurm and the clouds in order; a failed action is logged and counted, the rest still run. Launches
run up to ``daemon.launch_workers`` at once (``daemon.launch_pool``: a lease's actions stay in order, a node has
one launch at a time). Where a launch is carried out: ``Executor._launch`` (intent committed as LAUNCHING, under
the fence, before the provider call, the lease id as idempotency token)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from burstd.config import Config
from burstd.daemon.actions import (
    OWN_REASON, Action, AddPartition, Adopt, BootReplacement, ClearReason, Close, CreateLease, Drain, Fail, Launch,
    MarkReady, PowerDown, PowerUp, Refuse, ReleaseJob, RemovePartition, Requeue, ReturnToService, SetJobMarket,
    StartNow, Terminate, TerminateOrphan, Undrain,
)
from burstd.daemon.cycle_errors import step_failed
from burstd.daemon.failed_launches import FailedSpotLaunches, launch_failure_reason
from burstd.faults import crash_point
from burstd.daemon.launch_pool import LaunchPool
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.markets import JobMarkets
from burstd.daemon.metrics import Metrics
from burstd.daemon.planning import jobs_to_requeue, sane_launch_time
from burstd.daemon.requeue_record import REQUEUE, OwedRequeue
from burstd.daemon.requeue_record import decode as decode_requeue
from burstd.daemon.requeue_record import encode as encode_requeue
from burstd.domain.leadership import Fence, Fenced
from burstd.domain.lease import ALLOWED, FINAL_STATES, Lease, LeaseState
from burstd.domain.parity import reason_of as parity_reason
from burstd.domain.preemption import parse_preemption_reason
from burstd.domain.slurm import Snapshot
from burstd.providers.base import (
    ErrorKind, LaunchRequest, Offering, ParityRefusedError, Provider, ProviderError, launch_all_or_nothing,
)
from burstd.slurm.base import MAX_REASON, SlurmAdapter, SlurmError, check_reason

if TYPE_CHECKING:
    from burstd.daemon.pools import PoolHealth
    from burstd.daemon.ports import LeaseStore

log = get_logger("reconcile")
S = LeaseState


@dataclass
class CycleReport:
    started_at: float = 0.0
    duration_s: float = 0.0
    actions: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    pending_jobs: int = 0
    eligible_jobs: int = 0
    decider: str = ""
    role: str = ""  # active/standby only: "leader", "standby", or "deposed" (a fenced write was refused)
    # what the Executor did for the cycle's own use (not shown by the API)
    requeued: list[int] = field(default_factory=list)  # jobs burstd requeued (the requeue watch skips them)
    again: bool = False  # something changed that the next cycle should look at right away
    gangs_launched: set[str] = field(default_factory=set)  # one launch call per gang and cycle

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at, "duration_s": round(self.duration_s, 4), "actions": self.actions,
            "errors": self.errors[-20:], "pending_jobs": self.pending_jobs, "eligible_jobs": self.eligible_jobs,
            "decider": self.decider, **({"role": self.role} if self.role else {}),
        }


@dataclass(frozen=True)
class CycleContext:
    """What a cycle hands the Executor with each batch of actions: the newest snapshot, the leader's fencing token
    (every lease move is written under it; None = single daemon) and the cycle's report, which the Executor
    fills. The cycle makes a new context once it has read a new snapshot (``with_snapshot``); the report
    stays the same."""

    report: CycleReport = field(default_factory=CycleReport)
    snapshot: Snapshot | None = None
    fence: Fence | None = None

    def with_snapshot(self, snapshot: Snapshot) -> CycleContext:
        return CycleContext(self.report, snapshot, self.fence)


class Executor:
    """Applies actions in order (launches through a bounded pool); a failed action is logged and counted, the rest
    still run. Built once; each ``apply`` gets its cycle's ``CycleContext``."""

    def __init__(self, store: LeaseStore, adapter: SlurmAdapter, providers: dict[str, Provider], config: Config,
                 metrics: Metrics, *, clock: Callable[[], float] = time.time, health: PoolHealth | None = None,
                 hook_started: dict[str, float] | None = None, failed_jobs: dict[int, float] | None = None,
                 markets: JobMarkets | None = None, failed_spot_launches: FailedSpotLaunches | None = None,
                 agent_token: Callable[[Lease], str] | None = None):
        self.store = store
        self.adapter = adapter
        self.providers = providers
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.health = health  # launch and boot failures per pool
        # lease id -> when its ResumeProgram started (shared with the intake, for the resume->launch latency)
        self.hook_started = hook_started if hook_started is not None else {}
        # job id -> when a lease it asked for failed (held jobs to release); shared across cycles
        self.failed_jobs = failed_jobs if failed_jobs is not None else {}
        self.markets = markets if markets is not None else JobMarkets(store)  # decided market per job
        # spot launches that found no capacity, per job: they count toward the escalation (decide())
        self.failed_spot_launches = failed_spot_launches if failed_spot_launches is not None else FailedSpotLaunches()
        self.agent_token = agent_token  # lease -> its node's agent token, for providers that deliver one at boot
        self._cycle = CycleContext()  # the context of the apply() running now
        self._lock = threading.Lock()  # the report and the pool health, written by launch workers too
        # launches at once; 1 where the store cannot take calls from several threads (one shared connection)
        self.launch_workers = config.daemon.launch_workers if getattr(store, "concurrent", True) else 1

    def apply(self, actions: Iterable[Action], cycle: CycleContext) -> None:
        """Every action, in order, in ``cycle``'s context; returns once all of them, launches included, are over.
        With more than one launch worker a Launch runs on the pool and the next actions go on: one that touches a
        lease whose launch is in flight waits for it, one that names no lease waits for every launch in flight."""
        self._cycle = cycle
        pool = LaunchPool(self.launch_workers)
        try:
            for action in actions:
                pool.raise_if_fenced()
                if isinstance(action, Launch) and pool.width > 1:
                    self._submit_launch(pool, action)
                    continue
                lease_id = getattr(action, "lease_id", None)
                pool.wait_for({f"lease:{lease_id}"} if lease_id else None)
                self._run(action)
        finally:
            pool.close()  # every launch over; a deposed worker's Fenced is raised here

    def _run(self, action: Action, call: Callable[[], None] | None = None) -> None:
        """Carry out one action (``call``, else its ``_do_`` method) and count it, or log why it failed."""
        name = type(action).__name__
        try:
            if call is None:
                getattr(self, f"_do_{name}")(action)
            else:
                call()
        except Fenced:
            raise  # deposed: stop acting at once (the cycle ends and this daemon becomes a standby)
        except Exception as exc:  # noqa: BLE001 - one bad action must not stop the cycle
            self._failed(action, exc)
            return
        self._counted(name)

    def _counted(self, name: str) -> None:
        self.metrics.actions.labels(name).inc()
        report = self._cycle.report
        with self._lock:
            report.actions[name] = report.actions.get(name, 0) + 1

    def _failed(self, action: Action, exc: Exception) -> None:
        name = type(action).__name__
        with self._lock:
            self._cycle.report.errors.append(f"{name}: {exc}")
        step_failed(log, "action failed", exc, self.metrics, action=name, lease_id=getattr(action, "lease_id", None),
                    node=getattr(action, "node", None))

    def _submit_launch(self, pool: LaunchPool, a: Launch) -> None:
        """Which leases ``a`` launches is read here, on the cycle's thread (so a gang is launched once); the
        launch runs on the pool, holding its leases and their nodes until it is over."""
        key = {f"lease:{a.lease_id}"}
        try:
            lease = self.store.lease(a.lease_id)
            # a member of a gang already launched by this executor has nothing left to launch (and must not wait
            # for that launch: the next gang's would wait behind it); anything else in flight: read it after
            if (lease.gang is None or lease.gang not in self._cycle.report.gangs_launched) and pool.busy(key):
                pool.wait_for(key)
                lease = self.store.lease(a.lease_id)
            members = self._launch_members(a, lease)
        except Exception as exc:  # noqa: BLE001 - as any failed action
            self._failed(a, exc)
            return
        if not members:
            self._counted("Launch")
            return
        keys = {f"lease:{m.lease_id}" for m in members} | {f"node:{m.node_name}" for m in members}
        pool.submit(keys, lambda: self._run(a, lambda: self._launch(members)))

    # --- lease moves ------------------------------------------------------------------------
    def _move(self, lease_id: str, state: LeaseState, reason: str, extra: dict | None = None, **fields) -> Lease:
        if extra:  # what the event records beside the move (e.g. the jobs a failure requeued)
            fields["extra"] = extra
        if self._cycle.fence is not None:
            fields["fence"] = self._cycle.fence
        lease = self.store.transition(lease_id, state, reason=reason, at=self.clock(), **fields)
        log.info(f"lease {state.value.lower()}", extra=ev(lease_id=lease_id, node=lease.node_name, pool=lease.pool,
                                                         state=state.value, reason=reason,
                                                         job_id=lease.job_ids[0] if lease.job_ids else None,
                                                         instance_id=lease.instance_id or None))
        return lease

    def _do_Launch(self, a: Launch) -> None:
        """Launch the lease's VM, or, for a gang, every member's VM in one all-or-nothing call (one worker)."""
        members = self._launch_members(a)
        if members:
            self._launch(members)

    def _launch_members(self, a: Launch, lease: Lease | None = None) -> list[Lease]:
        """The leases ``a`` launches: its own, or its gang's (once per executor); none left to launch: []."""
        lease = lease if lease is not None else self.store.lease(a.lease_id)
        if lease.gang is None:
            members = [lease]
        elif lease.gang in self._cycle.report.gangs_launched:
            return []  # one call per gang and cycle: the other members' Launch actions are the same call
        else:
            self._cycle.report.gangs_launched.add(lease.gang)
            members = self.store.leases(states=(S.REQUESTED, S.LAUNCHING), gang=lease.gang)
        return [m for m in members if m.state in (S.REQUESTED, S.LAUNCHING)]

    def _launch(self, members: list[Lease]) -> None:
        """LAUNCHING committed (under the fence) for each member, then the provider call, then BOOTING. Runs on
        a launch worker: what it shares with the other workers is the store (a connection per call), the
        provider (thread-safe clients) and the Executor's bookkeeping (under ``_lock``)."""
        crash_point("launch.before_launching")
        moved = {m.lease_id for m in members if m.state == S.REQUESTED}
        members = [self._move(m.lease_id, S.LAUNCHING, "launch requested from the provider")
                   if m.state == S.REQUESTED else m for m in members]
        head = members[0]
        provider = self.providers[head.pool]
        if any(m.state == S.LAUNCHING and m.lease_id not in moved for m in members):
            self._still_leader()  # a retried launch: its intent was recorded earlier, maybe under another epoch
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
        token = self.agent_token if getattr(provider, "wants_agent_token", False) else None
        requests = [LaunchRequest(m.lease_id, m.node_name, m.pool, m.market,
                                  agent_token=token(m) if token is not None else "") for m in members]
        try:
            if head.gang is None:
                instances = [provider.launch(requests[0])]
            else:
                instances = launch_all_or_nothing(provider, head.gang, requests)
        except ProviderError as exc:
            self.metrics.error(f"provider_{exc.kind}")
            if isinstance(exc, ParityRefusedError):
                return self._parity_refused(members, exc)
            if exc.kind in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT):
                log.warning("launch will be retried", extra=ev(lease_id=head.lease_id, node=head.node_name,
                                                                  gang=head.gang, error=str(exc),
                                                                  error_class=str(exc.kind)))
                return
            # capacity (every offering exhausted), quota or config: the pool takes no new jobs for a while
            # and the jobs that asked for these nodes go back on-prem
            reason = launch_failure_reason(exc.kind, str(exc))
            self._health("record_launch_failure", head.pool, str(exc), str(exc.kind))
            if exc.kind == ErrorKind.CAPACITY:
                with self._lock:  # other launch workers record theirs too
                    self.failed_spot_launches.record(members)
            for m in members:
                self._do_Fail(Fail(m.lease_id, reason, requeue=m.job_ids))
                self._send_on_prem(m)
            return
        crash_point("launch.after_provider")
        self._health("record_launch_success", head.pool)
        for m, inst in zip(members, instances):
            self.metrics.launch_latency.observe(max(self.clock() - m.created_at, 0.0))
            self._move(m.lease_id, S.BOOTING, f"instance {inst.instance_id} launched",
                       instance_id=inst.instance_id, launched_at=self._launch_time(m, inst.launched_at))
        crash_point("launch.after_booting")
        self._cycle.report.again = True

    def _parity_refused(self, members: list[Lease], exc: ParityRefusedError) -> None:
        """The node's gate refused the image within the launch (a local image VM): what ``POST /v1/parity`` does
        for a cloud node's agent. The lease fails with the differences as its reason, its jobs go back to the
        queue with their priority, the refusal is counted (metric) and is a boot failure toward the pool's
        protection."""
        head = members[0]
        why = check_reason(parity_reason(list(exc.differences), MAX_REASON))
        self.metrics.parity_refusals.labels(head.pool).inc()
        log.warning("parity gate refused a node", extra=ev(node=head.node_name, lease_id=head.lease_id, reason=why))
        # the pool is protected before its jobs go back to the queue: no decision in between sees it open, and
        # whoever reads the failed lease finds the protection already recorded
        self._health("record_boot_failure", head.pool, why)
        for m in members:
            self._do_Fail(Fail(m.lease_id, why, requeue=m.job_ids))

    def _launch_time(self, lease: Lease, reported: float) -> float:
        """Spend starts at the provider's launch time, but only a sane one is billed (issue 9 item 10)."""
        t = sane_launch_time(reported, lease.created_at, self.clock())
        if t != reported:
            log.warning("launch time out of range; clamped", extra=ev(lease_id=lease.lease_id, reported=reported,
                                                                     used=t))
        return t

    def _do_Adopt(self, a: Adopt) -> None:
        self._move(a.lease_id, S.BOOTING, f"instance {a.instance_id} found in the listing",
                   instance_id=a.instance_id,
                   launched_at=self._launch_time(self.store.lease(a.lease_id), a.launched_at))
        self._cycle.report.again = True

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
        snapshot = self._cycle.snapshot
        if snapshot is not None:
            job_ids.update(dict.fromkeys(job.job_id for job in snapshot.jobs_on(lease.node_name)))
        for job_id in job_ids:
            self.failed_jobs[job_id] = self.clock()
            self._quiet(self.adapter.remove_partition, job_id, part)

    def _health(self, method: str, *args) -> None:
        if self.health is None:  # a unit test of one action may run without pool bookkeeping
            return
        try:
            with self._lock:  # a read-modify-write of the pool's record: one launch worker at a time
                getattr(self.health, method)(*args)
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not undo the action
            step_failed(log, "pool health not recorded", exc, self.metrics, call=method)

    def _do_MarkReady(self, a: MarkReady) -> None:
        crash_point("ready.before")
        lease = self._move(a.lease_id, S.READY, "slurmd registered", ready_at=self.clock())
        self._health("record_boot_success", lease.pool)
        self.metrics.ready_latency.observe(max(self.clock() - lease.created_at, 0.0))
        self._record_instance(lease)

    def _record_instance(self, lease) -> None:
        """Tell Slurm which instance backs the node, where the release can (23.11+: ``sacctmgr show instance``
        and sacct then show where each job ran); never in the way of the lease."""
        record = self.adapter.set_instance
        if not lease.instance_id:
            return
        pool = self.config.pool(lease.pool) if lease.pool in {p.name for p in self.config.pools} else None
        itype = (lease.offering or "").split("/")[0] or (pool.instance_types[0].name if pool and
                                                         pool.instance_types else "unknown")
        try:
            self._quiet(record, lease.node_name, lease.instance_id, itype)
        except ValueError as exc:  # an id Slurm's syntax cannot carry: the lease is fine without it
            log.info("instance not recorded in Slurm", extra=ev(node=lease.node_name, error=str(exc)))

    def _do_Fail(self, a: Fail) -> None:
        lease = self.store.lease(a.lease_id)
        if S.FAILED not in ALLOWED[lease.state]:
            return
        since = self.clock() if a.since is None else a.since
        requeue = self._live_jobs(lease, a.requeue, since) if a.requeue or a.since is not None else ()
        # a running node taken away (spot reclaim): its jobs lost their run through no fault of their own and may
        # start again at once (expedited: Slurm's own on 25.11+ for `--requeue=expedite` jobs, else starttime=now)
        expedite = lease.state in (S.READY, S.DRAINING)
        # owed durably before the lease says FAILED: a daemon killed before the requeue calls makes them after
        # its restart (``daemon.requeue_record``)
        owed = self.store.queue_intents([(REQUEUE, lease.node_name, encode_requeue(
            OwedRequeue(lease.lease_id, requeue, since, expedite)), self.clock())]) if requeue else []
        # the jobs it brings back go on record with the failure: what was requeued stays readable
        self._move(a.lease_id, S.FAILED, a.reason, extra={"requeue": list(requeue)} if requeue else None)
        if lease.state in (S.READY, S.DRAINING):  # a running node taken away (preempted, vanished): not a boot failure
            self.metrics.lost_node(len(requeue))
        if lease.state == S.BOOTING:
            self._health("record_boot_failure", lease.pool, a.reason)
        if a.power_down:
            self._slurm_power_down(lease.node_name, OWN_REASON + a.reason, force=True)
        crash_point("fail.before_requeue")
        self._requeue(requeue, expedite, owed)
        self._cycle.report.again = True

    def _requeue(self, job_ids: Iterable[int], expedite: bool, owed: list[int]) -> None:
        for job_id in job_ids:
            self.failed_jobs[job_id] = self.clock()
            self._cycle.report.requeued.append(job_id)
            self._quiet(self.adapter.requeue, job_id, expedite=expedite)
        crash_point("fail.after_requeue")
        if owed:  # a failure here leaves the record: the next cycle finds the jobs back and requeues none twice
            self.store.forget_intents(owed)

    def _do_Requeue(self, a: Requeue) -> None:
        """A requeue owed from before a restart (its record is forgotten with the cycle's other intents)."""
        try:
            owed = decode_requeue(a.record)
            lease = self.store.lease(owed.lease_id)
        except (ValueError, KeyError) as exc:
            log.warning("requeue record dropped", extra=ev(node=a.node, error=str(exc)))
            return
        other = self.store.lease_for_node(lease.node_name)
        keep = self._live_jobs(lease, owed.job_ids, owed.since,
                               node_reused=other is not None and other.lease_id != lease.lease_id)
        log.info("owed requeue", extra=ev(lease_id=lease.lease_id, node=a.node, jobs=list(owed.job_ids),
                                          requeued=list(keep)))
        self._requeue(keep, owed.expedite, [])
        self._cycle.report.again = True

    def _live_jobs(self, lease: Lease, jobs: tuple[int, ...], since: float, *,
                   node_reused: bool = False) -> tuple[int, ...]:
        """The jobs ``planning.jobs_to_requeue`` brings back: ``jobs`` plus every job the lease's allocations
        show on the node at ``since``, judged by each one's state now (the snapshot for live jobs; one Slurm
        query for each job it no longer lists). ``node_reused``: a newer lease holds the node, so a job running
        there now runs on that lease's VM (it came back already)."""
        try:
            allocations = self.store.allocations(lease.lease_id)
        except Exception as exc:  # noqa: BLE001 - without the record only still-live jobs come back
            step_failed(log, "allocations unreadable", exc, self.metrics, lease_id=lease.lease_id)
            allocations = []
        on_node = tuple(al.job_id for al in allocations if al.start <= since and (al.end is None or al.end >= since))
        candidates = tuple(dict.fromkeys(jobs + on_node))
        snapshot = self._cycle.snapshot
        listed = {j.job_id: j for j in snapshot.jobs} if snapshot is not None else {}
        states = {job_id: listed[job_id].state if job_id in listed else self._quiet_state(job_id)
                  for job_id in candidates}
        here = ({j.job_id for j in snapshot.jobs_on(lease.node_name)}
                if snapshot is not None and not node_reused else set())
        # a job the snapshot shows on other nodes was requeued by Slurm itself and runs (or boots) again there
        elsewhere = [jid for jid in candidates if jid in listed and listed[jid].nodes and jid not in here]
        keep = jobs_to_requeue(candidates, states, allocations, since, elsewhere)
        for job_id in candidates:
            if job_id not in keep:
                log.info("job not requeued", extra=ev(lease_id=lease.lease_id, job_id=job_id,
                                                      state=states.get(job_id) or "unknown to Slurm"))
        return keep

    def _quiet_state(self, job_id: int) -> str | None:
        try:
            return self.adapter.job_state(job_id)
        except SlurmError as exc:
            log.info("job state unknown", extra=ev(job_id=job_id, error=str(exc)))
            return None

    def _do_Drain(self, a: Drain) -> None:
        if self.store.lease(a.lease_id).state == S.DRAINING:
            # drained already (an agent's notice is both posted and left in the node's reason): nothing to do
            log.debug("lease already draining", extra=ev(lease_id=a.lease_id, reason=a.reason))
            return
        lease = self._move(a.lease_id, S.DRAINING, a.reason, extra={"running_jobs": list(a.jobs)} if a.jobs else None)
        snapshot = self._cycle.snapshot
        node = snapshot.node(lease.node_name) if snapshot is not None else None
        if node is not None and node.is_drained and parse_preemption_reason(node.reason) is not None:
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
            self._cycle.report.again = True  # the next cycle closes it as soon as the listing shows the VM gone
        else:
            self._still_leader()  # TERMINATING was recorded earlier: repeat the call only while leading
        ids = list(a.instance_ids) or ([lease.instance_id] if lease.instance_id else [])
        crash_point("terminate.before_provider")
        if ids:
            log.info("provider terminate call", extra=ev(lease_id=lease.lease_id, node=lease.node_name,
                                                         pool=lease.pool, instance_ids=ids))
            self.providers[lease.pool].terminate(ids)
        crash_point("terminate.after_provider")

    def _do_Close(self, a: Close) -> None:
        self._move(a.lease_id, S.TERMINATED, a.reason, ended_at=self.clock())
        self._cycle.report.again = True  # the node may be waiting (POWERING_UP) for its next lease

    def _do_TerminateOrphan(self, a: TerminateOrphan) -> None:
        log.warning("terminating orphan instance", extra=ev(pool=a.pool, instance_id=a.instance_id,
                                                             lease_id=a.lease_id or None, reason=a.reason))
        self.store.record_orphan_termination(a.pool, a.instance_id, lease_id=a.lease_id or None,
                                             reason=a.reason, fence=self._cycle.fence)
        crash_point("orphan.before_terminate")
        self.providers[a.pool].terminate([a.instance_id])

    def _do_CreateLease(self, a: CreateLease) -> None:
        pool = self.config.pool(a.pool)
        market, price = self.markets.lease_terms(pool, a.job_ids)  # the market decided for its jobs
        snapshot = self._cycle.snapshot
        lease = self.store.create_lease(
            pool=pool.name, node_name=a.node, market=market, price_per_hour_micros=price, job_ids=a.job_ids,
            account=snapshot.account_of(a.job_ids) if snapshot is not None else "", reason=a.reason,
        )
        log.info("lease requested", extra=ev(lease_id=lease.lease_id, node=a.node, market=market, reason=a.reason))
        self._cycle.report.again = True

    # --- Slurm ------------------------------------------------------------------------------
    def _do_PowerDown(self, a: PowerDown) -> None:
        self._slurm_power_down(a.node, a.reason, force=a.force)

    def _do_PowerUp(self, a: PowerUp) -> None:
        self.adapter.power_up(list(a.nodes))

    def _do_BootReplacement(self, a: BootReplacement) -> None:
        lease = self.store.lease(a.lease_id)
        cooled = a.offering is not None and self.health is not None and self._has_another(lease.pool, a.offering)
        if cooled and self.health is not None and a.offering is not None:  # the replacement launches elsewhere
            self.health.cooldown.mark(a.offering, reason="spot interruption notice")
        log.info("replacement node powered up", extra=ev(lease_id=lease.lease_id, node=a.node,
                                                          reclaimed=lease.node_name, cooled_down=cooled,
                                                          offering=str(a.offering or "")))
        self._quiet(self.adapter.power_up, [a.node])

    def _has_another(self, pool: str, offering: Offering) -> bool:
        """Whether the pool can launch in its market without ``offering``: cooling down a pool's only offering
        would fail the replacement's launch (and block the pool), so that one is left as it is."""
        offerings = getattr(self.providers.get(pool), "offerings", None)
        if offerings is None or self.health is None:
            return False
        cooldown = self.health.cooldown
        return any(o != offering and not cooldown.is_cooling(o) for o in offerings(offering.market))

    def _do_ReturnToService(self, a: ReturnToService) -> None:
        self.adapter.resume([a.node])
        log.info("node returned to service", extra=ev(node=a.node, reason=f"was DOWN: {a.reason}"))

    def _do_ClearReason(self, a: ClearReason) -> None:
        self._quiet(self.adapter.clear_reason, [a.node])
        log.info("stale node reason cleared", extra=ev(node=a.node, reason=a.reason))

    def _do_AddPartition(self, a: AddPartition) -> None:
        self.adapter.add_partition(a.job_id, a.partition)
        log.info("job made burst-eligible", extra=ev(job_id=a.job_id, partition=a.partition))

    def _do_ReleaseJob(self, a: ReleaseJob) -> None:
        self._quiet(self.adapter.release_hold, a.job_id)
        log.info("held job released (its cloud node failed to launch)", extra=ev(job_id=a.job_id))

    def _do_StartNow(self, a: StartNow) -> None:
        self._quiet(self.adapter.start_now, a.job_id)
        log.info("requeued job eligible at once (no requeue hold)", extra=ev(job_id=a.job_id))

    def _do_SetJobMarket(self, a: SetJobMarket) -> None:
        self.markets.set(a.job_id, a.market)
        log.info("job market decided", extra=ev(job_id=a.job_id, market=a.market or "pool's own"))

    def _do_RemovePartition(self, a: RemovePartition) -> None:
        self.adapter.remove_partition(a.job_id, a.partition)
        log.info("job burst eligibility revoked", extra=ev(job_id=a.job_id, partition=a.partition))

    # --- helpers ----------------------------------------------------------------------------
    def _still_leader(self) -> None:
        """Raise ``Fenced`` if this daemon no longer leads (no-op for a single daemon)."""
        if self._cycle.fence is not None:
            self.store.check_fence(self._cycle.fence)

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


