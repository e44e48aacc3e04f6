"""The intake: what Slurm's hooks, burstd-agent and admins ask of the daemon between cycles. Fast by design (a hook
must never block slurmscriptd): record durably, wake the cycle, return.

* ``request_resume`` (ResumeProgram) is where a lease is created: one REQUESTED lease per node, committed
  before the call returns, a multi-node job's nodes as one gang, in the market the policy decided for its jobs
  (``daemon.markets``: a spot pool's job escalated to on-demand gets an on-demand lease);
* ``add_intent`` (SuspendProgram, ResumeFailProgram, agent notices, admin drain/terminate) queues a request
  in the store's ``intent`` table; the next cycle applies it (``planning.plan_intents``) and forgets it;
* ``request_gc`` (``burstctl cloud gc``) queues an orphan sweep the same way: the leader's next cycle collects
  the orphans with the sweep's grace (``planning.plan_orphans``), fenced and recorded like its own.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Mapping, Sequence

from burstd.config import Config
from burstd.daemon.actions import Intent
from burstd.domain.store_errors import StoreBusy
from burstd.faults import crash_point
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.markets import JobMarkets
from burstd.daemon.planning import ResumeJob, Sweep, plan_gangs, resume_order
from burstd.domain.lease import ACTIVE_STATES
from burstd.domain.slurm import Job, Snapshot

from burstd.daemon.ports import LeaseStore

log = get_logger("intake")

#: The intent kind of an orphan sweep; its node column names the pool (``ALL_POOLS``: every pool), its reason
#: the grace in seconds.
GC = "gc"
ALL_POOLS = "*"
#: How many hook-read jobs the intake keeps for the launch guard (the newest; the cycle's snapshot takes over).
FRESH_JOBS_MAX = 4096
#: Where hook reads of Slurm run, so a hook waits for one only as long as its own deadline allows.
_READER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="intake-read")

class UnknownNode(ValueError):
    """A hook or admin named a node that is in no pool."""


class Intake:
    """Requests from outside the cycle. ``lock`` is held while a gang's leases are recorded; the cycle reads leases
    under it so it sees a whole gang or none of it."""

    def __init__(self, config: Config, store: LeaseStore, clock: Callable[[], float],
                 snapshot: Callable[[], Snapshot | None], wake: Callable[[], None],
                 markets: JobMarkets | None = None, read_jobs: Callable[[Sequence[int]], Sequence[Job]] | None = None):
        self.config = config
        self.markets = markets if markets is not None else JobMarkets(store)  # the market decided per job
        self.store = store
        self.clock = clock
        self._snapshot = snapshot  # the cycle's newest snapshot (accounts of the jobs that asked for a node)
        self._wake = wake
        # the resume file's jobs read from Slurm at the hook (``sbatch -p cloud`` reaches the hook before any
        # snapshot holds the job): the lease's account, and what the launch guard judges (issue 21 item 1)
        self._read_jobs = read_jobs
        self.fresh_jobs: dict[int, Job] = {}
        self._fresh_lock = threading.Lock()
        self.lock = threading.Lock()
        self.hook_started: dict[str, float] = {}  # lease id -> when its ResumeProgram started (in memory only)

    def check_nodes(self, nodes: Sequence[str]) -> None:
        unknown = [n for n in nodes if self.config.pool_of_node(n) is None]
        if unknown:
            raise UnknownNode(
                f"unknown node(s) {', '.join(unknown[:10])}: not in any pool "
                f"({', '.join(f'{p.node_prefix}[1-{p.node_count}]' for p in self.config.pools) or 'no pools'})"
            )

    def request_resume(self, nodes: Sequence[str], jobs: dict[str, tuple[int, ...]] | None = None,
                       hook_t0: float | None = None, info: Mapping[int, ResumeJob] | None = None,
                       wait_s: float | None = None) -> dict:
        """ResumeProgram: one REQUESTED lease per node without an open one; committed before return.

        ``wait_s``: how long the hook's call may wait for the intake (a cycle holds it while it reads leases);
        past it, StoreBusy and nothing recorded, never a lease committed after the hook gave up.

        ``info``: the resume file's priority and exclusive per job (26.05+): gangs follow them and the leases are
        recorded highest priority first (``planning.plan_gangs``, ``planning.resume_order``).

        A node whose previous lease is still FAILED/TERMINATING (its old VM being cleaned up) is
        ``deferred``: the store keeps one open lease per node, and the cycle records the new lease from
        Slurm's POWERING_UP state as soon as the old one closes.
        """
        self.check_nodes(nodes)
        jobs = jobs or {}
        info = info or {}
        if wait_s is not None:  # the read takes part of the hook's wait, never more: the lease comes first
            t0 = time.monotonic()
            self._read_fresh([*dict.fromkeys(j for ids in jobs.values() for j in ids)], 0.5 * max(wait_s, 0.0))
            wait_s = max(wait_s - (time.monotonic() - t0), 0.0)
        else:
            self._read_fresh([*dict.fromkeys(j for ids in jobs.values() for j in ids)])
        created: list[str] = []
        done: list[str] = []  # nodes whose lease is committed
        existing: list[str] = []
        deferred: list[str] = []
        if not self.lock.acquire(timeout=-1 if wait_s is None else max(wait_s, 0.0)):
            raise StoreBusy(f"the resume intake stayed busy past the hook's wait ({wait_s:.2f} s): "
                            "nothing was recorded")
        try:
            fresh = []
            for node in resume_order(nodes, jobs, info):
                current = self.store.lease_for_node(node)
                if current is None:
                    fresh.append(node)
                else:
                    (existing if current.state in ACTIVE_STATES else deferred).append(current.lease_id)
            pools = {p.name: p for p in self.config.pools}
            leaders = plan_gangs(fresh, jobs, lambda n: getattr(self.config.pool_of_node(n), "name", None),
                                 lambda name: pools[name].all_or_nothing, info)
            gang_ids = {leader: uuid.uuid4().hex for leader in set(leaders.values())}  # the leader's lease id
            for node in fresh:
                pool = self.config.pool_of_node(node)
                assert pool is not None  # check_nodes above
                job_ids = tuple(jobs.get(node, ()))
                gang = gang_ids.get(leaders.get(node, ""))
                market, price = self.markets.lease_terms(pool, job_ids)  # e.g. escalated to on-demand
                try:
                    lease = self.store.create_lease(
                        pool=pool.name, node_name=node, market=market, price_per_hour_micros=price,
                        job_ids=job_ids, account=self._account(job_ids), reason="ResumeProgram", gang=gang,
                        lease_id=gang if gang is not None and leaders[node] == node else None,
                        at=self.clock(),
                    )
                except StoreBusy as exc:  # say exactly what was recorded before the lock timed out
                    if done:
                        self._wake()
                    rest = fresh[fresh.index(node):]
                    raise StoreBusy(f"{exc}: lease(s) recorded for {', '.join(done) or 'no node'}; "
                                    f"none for {', '.join(rest)}") from None
                crash_point("resume.after_commit")
                if hook_t0 is not None:
                    self.hook_started[lease.lease_id] = hook_t0
                log.info("lease requested", extra=ev(lease_id=lease.lease_id, node=node, pool=pool.name, gang=gang,
                                                     market=market,
                                                     job_id=job_ids[0] if job_ids else None))
                created.append(lease.lease_id)
                done.append(node)
        finally:
            self.lock.release()
        self._wake()
        return {"created": created, "existing": existing, "deferred": deferred}

    def add_intent(self, kind: str, nodes: Sequence[str], reason: str = "") -> None:
        """Queue a request for the next cycle, durably: it is in the store before this returns, so a daemon
        killed before the cycle still drains/terminates after its restart (the cycle applies it and then
        forgets it; applying one twice is harmless). A store error propagates: the caller (the API) answers an
        error, and nothing is queued."""
        self.check_nodes(nodes)
        now = self.clock()
        self.store.queue_intents([(kind, n, reason, now) for n in nodes])
        self._wake()

    def request_gc(self, pool: str | None, grace_s: float, by: str = "") -> None:
        """Queue an orphan sweep of ``pool`` (None: every pool) for the leader's next cycle; durable on return."""
        if pool is not None and pool not in {p.name for p in self.config.pools}:
            raise LookupError(f"no pool {pool!r} in this daemon's config")
        if not grace_s >= 0:
            raise ValueError(f"the grace must be a number of seconds >= 0, got {grace_s!r}")
        self.store.queue_intents([(GC, pool or ALL_POOLS, repr(float(grace_s)), self.clock())])
        log.warning("orphan sweep queued", extra=ev(pool=pool or "all", grace_s=grace_s, by=by or None))
        self._wake()

    @staticmethod
    def sweep_of(intent: Intent) -> Sweep:
        """The sweep a ``gc`` intent asks for (a grace that does not read as seconds: the config's applies)."""
        try:
            grace = float(intent.reason)
        except ValueError:
            grace = float("inf")
        return Sweep(None if intent.node == ALL_POOLS else intent.node, grace if grace >= 0 else float("inf"))

    def pending(self) -> list[Intent]:
        """Queued requests, oldest first (read from the store: whichever daemon queued them)."""
        return [Intent(i.kind, i.node, i.reason, i.at, i.intent_id) for i in self.store.intents()]

    def applied(self, intents: Sequence[Intent]) -> None:
        """The cycle applied these: forget them (those queued meanwhile stay). If this fails they are applied
        again next cycle, which is harmless."""
        self.store.forget_intents([i.intent_id for i in intents])

    def _read_fresh(self, job_ids: Sequence[int], within_s: float | None = None) -> None:
        """Read the hook's jobs from Slurm now, waiting at most ``within_s`` (the read goes on in the background
        past it, bounded by ``slurm.command_timeout_s``); on failure or timeout the last snapshot answers, and the
        launch guard still judges the lease (a lease whose jobs nobody knows is charged to no account)."""
        if not job_ids or self._read_jobs is None:
            return
        try:
            if within_s is None:
                got = self._read_jobs(job_ids)
            else:
                got = _READER.submit(self._read_jobs, job_ids).result(timeout=within_s)
        except Exception as exc:  # noqa: BLE001 - the hook must still record its leases
            log.warning("resume file's jobs not read from Slurm; the last snapshot answers",
                        extra=ev(error=str(exc) or type(exc).__name__, job_id=job_ids[0]))
            return
        with self._fresh_lock:  # hooks run in parallel threads; readers only ``get`` (atomic)
            for job in got:
                self.fresh_jobs.pop(job.job_id, None)
                self.fresh_jobs[job.job_id] = job  # newest last: the oldest go first past the bound
            while len(self.fresh_jobs) > FRESH_JOBS_MAX:
                del self.fresh_jobs[next(iter(self.fresh_jobs))]

    def _account(self, job_ids: Sequence[int]) -> str:
        for jid in job_ids:
            job = self.fresh_jobs.get(jid)
            if job is not None and job.account:
                return job.account
        snap = self._snapshot()
        return snap.account_of(job_ids) if snap is not None else ""
