"""A discrete-event model of an on-prem cluster plus cloud pools, driven by the real ``decide()``.

On-prem: FCFS with EASY backfill over one pool of units (CPUs, or GPUs for GPU traces) — a fluid model
(no node packing) unless ``placement`` is "first-fit" (whole nodes, ``burstd.simulate.placement``; the
backfill shadow time stays the fluid estimate), or out of order (``out_of_order``: any queued job that
fits starts, no backfill reservation; Starburst's "loop"). Backfill looks at the first ``backfill_depth``
queued jobs, as Slurm's ``bf_max_job_test`` does, and trusts time limits, not real run times (as Slurm does).
``user_limits``: per-user running limits (``burstd.simulate.limits``); a job its user's limit holds is skipped.
``queue_priority``: the queue is ordered by class, then submit time (``burstd.simulate.queue_priority``).

Cloud: every ``cycle_s`` while jobs wait, the simulator builds a ``Snapshot`` (pending jobs, running
jobs with their time-limit end times, on-prem nodes), the live ``Lease``s, a ``BudgetBook`` of the spend
so far this period and the price quotes, and calls ``decide()``. A job made eligible leaves the on-prem
queue (Slurm would start it at once on the powered-down cloud nodes), its nodes boot for ``boot_s``, and it
runs. On spot, each node's time to preemption is drawn from the measured traces (``SpotModel``); a
preempted job loses the work since its last checkpoint (all of it for a job outside ``checkpoint_share``),
is requeued on-prem with ``restart_count + 1`` (so ``decide()``'s escalation applies) and its nodes' time is billed. Billing: nodes x (boot + run) x
the price at launch. With ``gpu_slices`` a GPU job bursts as one one-GPU node per GPU (a cloud of
one-GPU nodes priced per GPU-hour), so its node-hours are GPU-hours: billed per GPU-hour, and
compute-wait's wait per node-hour is a wait per GPU-hour (Starburst's setting).

``warmup_jobs``: the metrics leave out the first and the last that many jobs of the replay (by arrival
order), as Starburst does to measure the steady state; their cost is left out too.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from burstd.config import Config
from burstd.domain.budget import AccountBudget, BudgetBook, PriceQuote
from burstd.domain.data import DataMove, DataNeeds
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.slurm import Gres, Job, Node, Snapshot
from burstd.policy.budget import cost_micros
from burstd.policy.context import Prepared
from burstd.policy.data_cost import DataView
from burstd.policy.decide import decide
from burstd.policy.progress import kept_work_s
from burstd.simulate.data_model import DataModel
from burstd.simulate.limits import NO_LIMITS, UserLimits, UserRunning
from burstd.simulate.placement import PLACEMENTS, FirstFit
from burstd.simulate.queue_priority import NO_PRIORITY, QueuePriority
from burstd.simulate.shapes import cannot_burst_reason, count_reasons
from burstd.simulate.spot import SpotModel
from burstd.simulate.traces import TraceJob

PERIOD_S = {"month": 30 * 86400, "week": 7 * 86400, "day": 86400}


@dataclass(slots=True)
class SimJob:
    tj: TraceJob
    units: int  # on-prem units (CPUs or GPUs)
    nodes: int
    cpn: int  # CPUs a node
    gpn: int  # GPUs a node
    remaining: float  # run time still to do
    limit: float
    queued_at: float
    restarts: int = 0
    first_start: float | None = None
    last_start: float | None = None  # the start of the run that finished (after any preemptions)
    end: float | None = None
    burst: bool = False
    pending_job: Job | None = None
    gone: bool = False  # left the queue (started or burst)
    exp_end: float = 0.0
    idx: int = 0  # position in the replay (arrival order), for the warm-up cut
    placed: tuple[tuple[int, int], ...] = ()  # first-fit: (node, units) held on-prem
    costs: list[tuple[str, float]] = field(default_factory=list)  # (market, USD) per cloud run
    believed_kept: float = 0.0  # work burstd believes it kept from preempted runs (what the daemon would pass)


@dataclass(slots=True)
class SimResult:
    policy: str
    jobs: int = 0
    jobs_burst: int = 0
    cloud_cost_usd: float = 0.0
    wait_mean_s: float = 0.0  # to the final start: a spot start later preempted is not "no wait"
    wait_p95_s: float = 0.0
    first_wait_mean_s: float = 0.0  # to the first start (what was reported before; flatters spot)
    delay_mean_s: float = 0.0  # JCT minus run time: every second a job was not making progress
    delay_p95_s: float = 0.0
    jct_mean_s: float = 0.0
    jct_p95_s: float = 0.0
    bounded_slowdown_mean: float = 0.0
    preemptions: int = 0
    lost_node_hours: float = 0.0
    decide_calls: int = 0
    warmup_jobs: int = 0  # left out of every metric at each end of the replay (cost included)
    unfinished: int = 0  # jobs that could never run (too big for on-prem and not allowed to burst)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of the replay (this process's), what bench_simulate.py reports
    cost_by_market: dict[str, float] = field(default_factory=dict)
    cannot_burst: dict[str, int] = field(default_factory=dict)  # jobs no cloud pool fits, by reason
    # with a data model (SimSetup.data): data moved and what it cost (included in cloud_cost_usd)
    data_usd: float = 0.0
    data_gb_in: float = 0.0
    cache_hits: int = 0  # bursts whose input was already near the pool
    kept_home_for_data: int = 0  # jobs decide() kept home at least once for their data

    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in
                ((f, getattr(self, f)) for f in self.__slots__)}


@dataclass(slots=True)
class SimSetup:
    config: Config
    gpu: bool  # units are GPUs (GPU trace) or CPUs
    onprem_units: int
    units_per_node: int  # CPUs (or GPUs) per on-prem node
    cpus_per_gpu: int = 1
    boot_s: float = 120.0
    cycle_s: float = 120.0
    backfill_depth: int = 100
    checkpoint_s: float = 3600.0
    spot: SpotModel | None = None
    decide_enabled: bool = True
    constant_wait_s: float | None = None  # constant-wait's wait, when it differs from policy.waiting.min_wait_s
    market: str | None = None  # every pool on this market ("on-demand" or "spot"); None = as configured
    # share of jobs that checkpoint at all (the rest restart from zero when preempted); which jobs is a
    # fixed function of the job id, so every policy sees the same ones
    checkpoint_share: float = 1.0
    placement: str = "fluid"  # on-prem: "fluid" pool of units, or "first-fit" on whole nodes
    gpu_slices: bool = False  # a GPU job bursts as one one-GPU node per GPU (GPU-hour billing and wait)
    warmup_jobs: int = 0  # jobs left out of the metrics at each end of the replay
    out_of_order: bool = False  # on-prem: any queued job that fits starts (Starburst's "loop"), no backfill
    data: DataModel | None = None  # what each job reads and writes (burstd.simulate.data_model); None: no data
    # --config: the burstd row runs the file's [policy] as the daemon would (its waiting.kind too)
    policy_as_configured: bool = False
    # on-prem: the scheduler runs in passes this many seconds apart (a job starts at the next pass), as the
    # sites' schedulers did; 0: at every event (calibration, issue 25 item 2)
    sched_pass_s: float = 0.0
    user_limits: UserLimits = NO_LIMITS  # per-user running jobs / units on-prem; off by default
    queue_priority: QueuePriority = NO_PRIORITY  # on-prem queue in class order, then submit; off by default


class Simulator:
    def __init__(self, setup: SimSetup, jobs: list[TraceJob], name: str = "sim"):
        self.s = setup
        self.cfg = setup.config
        self.name = name
        self.trace = jobs
        self.free = setup.onprem_units
        self.users = UserRunning(setup.user_limits) if setup.user_limits.active else None
        self.order = setup.queue_priority.order_key()  # the pending queue's order (burstd.simulate.queue_priority)
        self._passes: set[float] = set()  # scheduler passes already on the event heap
        self.queue: list[SimJob] = []
        self.running: dict[int, SimJob] = {}
        # the running on-prem jobs as (time-limit end, units, job id), kept sorted for the backfill shadow
        self.by_end: list[tuple[float, int, int]] = []
        self.run_jobs: dict[int, Job] = {}  # Slurm view of running jobs (on-prem and cloud)
        self.leases: dict[int, list[Lease]] = {}
        self.lease_list: list[Lease] | None = None  # self.leases flattened, rebuilt after a change
        self.requeued: dict[int, SimJob] = {}  # queued jobs that ran before (their progress goes to decide())
        self.events: list[tuple[float, int, int, SimJob | None]] = []  # (t, seq, kind, the job of kinds 0-2)
        self.seq = 0
        self.tick_at: float | None = None
        self.res = SimResult(name)
        self.spent: dict[str, int] = {}
        self.spent_books: dict[str, AccountBudget] = {}
        self.site_spent = 0
        self.period = PERIOD_S[self.cfg.budget.period]
        self.period_idx = 0
        self.book_cache: BudgetBook | None = None
        self.done: list[SimJob] = []
        self.part = {p.name: p.partition for p in self.cfg.pools}
        upn = setup.units_per_node
        n_nodes = max(1, math.ceil(setup.onprem_units / upn))
        gres = (Gres("gpu", None, upn),) if setup.gpu else ()
        cpus = upn * setup.cpus_per_gpu if setup.gpu else upn
        self.nodes = tuple(Node(f"n{i}", "ALLOCATED", partitions=tuple(self.cfg.policy.onprem_partitions[:1] or
                                                                         ["batch"]), cpus=cpus, gres=gres)
                           for i in range(n_nodes))
        self.home = (self.cfg.policy.onprem_partitions or ["batch"])[0]
        if setup.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {setup.placement!r}; known: {', '.join(PLACEMENTS)}")
        self.placer = FirstFit(n_nodes, upn) if setup.placement == "first-fit" else None
        self.quotes = self._quotes()
        # the config and prices never change during a replay: decide() reads them once, not every cycle
        self.prepared = Prepared(self.cfg, self.quotes)
        self.near: dict[str, set[str]] = {p.name: set() for p in self.cfg.pools}  # cache keys near each pool
        self.kept_for_data: set[int] = set()
        self.needs_cache: dict[int, DataNeeds] = {}  # the data model's draw per job (drawn once)

    # ---- setup helpers
    def _quotes(self) -> dict[tuple[str, str], PriceQuote]:
        rate = self.s.spot.rate_per_hour if self.s.spot else 0.0
        out: dict[tuple[str, str], PriceQuote] = {}
        for p in self.cfg.pools:
            out[(p.name, p.market)] = PriceQuote(p.name, p.market, int(round(p.price_per_hour * 1e6)),
                                                 rate if p.market == "spot" else 0.0)
            if p.ondemand_price_per_hour is not None and p.market == "spot":
                out[(p.name, "on-demand")] = PriceQuote(p.name, "on-demand",
                                                        int(round(p.ondemand_price_per_hour * 1e6)), 0.0)
        return out

    def _sim_job(self, tj: TraceJob) -> SimJob:
        if self.s.gpu:
            gpus = max(tj.gpus, 1)
            if self.s.gpu_slices:
                return SimJob(tj, gpus, gpus, self.s.cpus_per_gpu, 1, tj.runtime, tj.time_limit, tj.submit)
            upn = self.s.units_per_node
            nodes = max(1, math.ceil(gpus / upn))
            gpn = math.ceil(gpus / nodes)
            return SimJob(tj, gpus, nodes, gpn * self.s.cpus_per_gpu, gpn, tj.runtime, tj.time_limit, tj.submit)
        nodes = max(1, math.ceil(tj.cpus / self.s.units_per_node))
        return SimJob(tj, tj.cpus, nodes, math.ceil(tj.cpus / nodes), 0, tj.runtime, tj.time_limit, tj.submit)

    def _push(self, t: float, kind: int, j: SimJob | None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, j))

    # ---- Slurm views
    def _pending_view(self, j: SimJob) -> Job:
        if j.pending_job is None:
            tj = j.tj
            j.pending_job = Job(
                tj.job_id, "sim", tj.user, tj.account, (self.home,), "PENDING", reason="Resources", priority=0,
                submit_time=int(tj.submit), eligible_time=int(j.queued_at),
                time_limit_min=max(1, math.ceil(j.limit / 60)), node_count=j.nodes,
                cpus=j.cpn * j.nodes, gres=(Gres("gpu", None, j.gpn),) if j.gpn else (), restart_count=j.restarts)
        return j.pending_job

    def _running_view(self, j: SimJob, partition: str, start: float, end: float) -> Job:
        tj = j.tj
        return Job(tj.job_id, "sim", tj.user, tj.account, (partition,), "RUNNING", submit_time=int(tj.submit),
                   start_time=int(start), end_time=int(end), time_limit_min=max(1, math.ceil(j.limit / 60)),
                   node_count=j.nodes, cpus=j.units if not self.s.gpu else j.cpn * j.nodes,
                   gres=(Gres("gpu", None, j.gpn),) if j.gpn else ())

    def _book(self, now: float) -> BudgetBook:
        idx = int(now // self.period)
        if idx != self.period_idx:
            self.period_idx, self.spent, self.site_spent, self.book_cache = idx, {}, 0, None
            self.spent_books = {}
        if self.book_cache is None:
            self.book_cache = BudgetBook(idx * self.period, (idx + 1) * self.period, None, self.site_spent, None,
                                         dict(self.spent_books))
        return self.book_cache

    def _charge(self, account: str, micros: int, market: str) -> None:
        spent = self.spent[account] = self.spent.get(account, 0) + micros
        self.spent_books[account] = AccountBudget(account, None, spent)  # the book's entry, kept up to date
        self.site_spent += micros
        self.book_cache = None
        self.res.cloud_cost_usd += micros / 1e6
        self.res.cost_by_market[market] = self.res.cost_by_market.get(market, 0.0) + micros / 1e6

    # ---- on-prem scheduling
    def _start_onprem(self, j: SimJob, t: float) -> None:
        self.free -= j.units
        if self.users is not None:
            self.users.start(j.tj.user, j.units)
        j.gone = True
        j.pending_job = None  # rebuilt if it is ever queued again: a finished job keeps no Slurm view (memory)
        self.requeued.pop(j.tj.job_id, None)
        if j.first_start is None:
            j.first_start = t
        j.last_start = t
        j.exp_end = t + j.limit
        self.running[j.tj.job_id] = j
        bisect.insort(self.by_end, (j.exp_end, j.units, j.tj.job_id))
        self.run_jobs[j.tj.job_id] = self._running_view(j, self.home, t, j.exp_end)
        self._push(t + j.remaining, 0, j)

    def _schedule_at_pass(self, t: float) -> None:
        """Schedule now, or at the next scheduler pass when the site ran in passes (``sched_pass_s``)."""
        every = self.s.sched_pass_s
        if every <= 0:
            self._schedule(t)
            return
        at = math.ceil(t / every) * every
        if at not in self._passes:
            self._passes.add(at)
            self._push(at, 4, None)

    def _schedule(self, t: float) -> None:
        q = self.queue
        if not q or self.free <= 0:
            return
        free = self.free
        k, n = 0, len(q)
        started = False
        users = self.users  # None: no per-user limit, the loops below as they were
        if self.s.out_of_order:
            # Starburst's "loop": every queued job that fits starts, in queue order; none is held back
            # for the head (no reservation)
            for j in q:
                if free <= 0:
                    break
                if users is not None and not users.allows(j.tj.user, j.units):
                    continue
                if not j.gone and j.units <= free and self._place(j):
                    free -= j.units
                    self._start_onprem(j, t)
                    started = True
            if started:
                self.queue = [j for j in q if not j.gone]
            return
        while k < n:
            j = q[k]
            if not j.gone and (users is None or users.allows(j.tj.user, j.units)):  # a blocked job is passed
                if j.units > free or not self._place(j):
                    break
                free -= j.units
                self._start_onprem(j, t)
                started = True
            k += 1
        if k < n and free > 0 and self.s.backfill_depth > 0:
            head = q[k]
            avail, shadow, extra = free, math.inf, 0
            for e, u, _ in self.by_end:
                avail += u
                if avail >= head.units:
                    shadow, extra = e, avail - head.units
                    break
            depth = 0
            for j in q[k + 1:]:
                if depth >= self.s.backfill_depth or free <= 0:
                    break
                if j.gone or (users is not None and not users.allows(j.tj.user, j.units)):
                    continue  # a job its user's limit blocks is not a candidate (Maui's blocked list)
                depth += 1
                if j.units <= free:
                    if t + j.limit <= shadow:
                        if not self._place(j):
                            continue
                        free -= j.units
                        self._start_onprem(j, t)
                        started = True
                    elif j.units <= extra and self._place(j):
                        free -= j.units
                        extra -= j.units
                        self._start_onprem(j, t)
                        started = True
        if started or (q and q[0].gone):
            self.queue = [j for j in q if not j.gone]

    def _place(self, j: SimJob) -> bool:
        """First-fit: take nodes for ``j`` (False when its demands fit no free nodes); fluid: always."""
        if self.placer is None:
            return True
        placed = self.placer.place(j.units)
        if placed is None:
            return False
        j.placed = placed
        return True

    def _enqueue(self, j: SimJob, t: float) -> None:
        j.gone = False
        j.queued_at = t
        j.pending_job = None
        key, q = self.order, self.queue
        k = key(j.tj)
        if q and key(q[-1].tj) > k:  # a requeued job, or one of a higher class: into its place in the order
            q.insert(bisect.bisect(q, k, key=lambda x: key(x.tj)), j)
        else:
            q.append(j)

    # ---- cloud
    def _burst(self, j: SimJob, pool: str, market: str, t: float, move: DataMove | None = None) -> None:
        j.gone = True
        j.pending_job = None
        j.burst = True
        q = self.quotes.get((pool, market))
        price = q.price_per_hour_micros if q else 0
        boot = self.s.boot_s
        if move is not None:  # the inputs cross the link while the node boots and before the job starts
            boot += move.stage_in_s
            self._charge(j.tj.account, move.cost_micros, "data")
            j.costs.append(("data", move.cost_micros / 1e6))
            self.res.data_usd += move.cost_micros / 1e6
            self.res.data_gb_in += move.bytes_in / 1e9
            self.res.cache_hits += bool(move.bytes_cached)
            self.near[pool].update(i.cache_key for i in self._needs(j.tj.job_id).inputs)
        run = j.remaining
        start = t + boot
        if j.first_start is None:
            j.first_start = start
        j.last_start = start
        life = math.inf
        if market == "spot" and self.s.spot is not None:
            life = min(self.s.spot.draw() for _ in range(j.nodes))
        part = self.part[pool]
        self.run_jobs[j.tj.job_id] = self._running_view(j, part, start, start + j.limit)
        # one lease a node, all one object: decide() counts a job's leases (the guard's commitment, the pool's
        # nodes) and tells them apart only by node name, for cloud nodes this snapshot never lists
        self.leases[j.tj.job_id] = [
            Lease(f"sim-{j.tj.job_id}", pool, f"{pool}-{j.tj.job_id}", LeaseState.READY, market=market,
                  price_per_hour_micros=price, launched_at=t, job_ids=(j.tj.job_id,), account=j.tj.account)
        ] * j.nodes
        self.lease_list = None
        self.requeued.pop(j.tj.job_id, None)
        if life < boot + run:
            billed = life
            progress = max(0.0, life - boot)
            saved = (math.floor(progress / self.s.checkpoint_s) * self.s.checkpoint_s
                     if checkpoints(j.tj.job_id, self.s.checkpoint_share) else 0.0)
            lost = progress - saved
            # decide() is told what the daemon would know: whole checkpoint intervals of the run, at the
            # config's interval, whether or not this job really checkpointed
            j.believed_kept += kept_work_s((progress,), self.cfg.policy.checkpoint_interval_s)
            self.res.preemptions += 1
            self.res.lost_node_hours += j.nodes * lost / 3600.0
            j.remaining = run - saved
            self._push(t + life, 2, j)
        else:
            billed = boot + run
            self._push(t + billed, 1, j)
        micros = j.nodes * cost_micros(price, billed)
        j.costs.append((market, micros / 1e6))
        self._charge(j.tj.account, micros, market)

    def _tick(self, t: float) -> None:
        self.tick_at = None
        if not self.queue or not self.s.decide_enabled:
            return
        pending = [j.pending_job or self._pending_view(j) for j in self.queue if not j.gone]
        snap = Snapshot(t, tuple(pending) + tuple(self.run_jobs.values()), self.nodes)
        leases = self.lease_list
        if leases is None:
            leases = self.lease_list = [lease for ls in self.leases.values() for lease in ls]
        done = {jid: j.believed_kept for jid, j in self.requeued.items()}
        model = self.s.data
        data = None if model is None else DataView({j.job_id: self._needs(j.job_id) for j in pending}, self.near)
        d = decide(snap, leases, self._book(t), self.quotes, self.cfg, t, explain=False, progress=done,
                   prepared=self.prepared, data=data)
        self.kept_for_data.update(d.kept_home_for_data)
        self.res.decide_calls += 1
        if d.eligible:
            by_id = {j.tj.job_id: j for j in self.queue}
            for e in d.eligible:
                j = by_id.get(e.job_id)
                if j is not None and not j.gone:
                    self._burst(j, e.pool, e.market, t, d.data_moves.get(e.job_id))
            self.queue = [j for j in self.queue if not j.gone]

    def _needs(self, job_id: int) -> DataNeeds:
        got = self.needs_cache.get(job_id)
        if got is None:
            assert self.s.data is not None
            got = self.needs_cache[job_id] = self.s.data.needs(job_id)
        return got

    def _want_tick(self, t: float) -> None:
        if self.s.decide_enabled and self.queue and self.tick_at is None:
            nxt = (math.floor(t / self.s.cycle_s) + 1) * self.s.cycle_s
            self.tick_at = nxt
            self._push(nxt, 3, None)

    # ---- main loop
    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        import time

        t0, c0 = time.perf_counter(), time.process_time()
        arrivals = [self._sim_job(tj) for tj in self.trace]
        for i, a in enumerate(arrivals):
            a.idx = i
        if self.s.decide_enabled:
            pools = [(p.cpus, p.gpus, p.node_count) for p in self.cfg.pools]
            self.res.cannot_burst = count_reasons([cannot_burst_reason(j.cpn, j.gpn, j.nodes, pools)
                                                   for j in arrivals])
        ai, na = 0, len(arrivals)
        ev = self.events
        while ai < na or ev:
            if ai < na and (not ev or arrivals[ai].tj.submit <= ev[0][0]):
                j = arrivals[ai]
                ai += 1
                t = j.tj.submit
                self._enqueue(j, t)
                # arrivals at the same instant are queued together before scheduling
                while ai < na and arrivals[ai].tj.submit == t:
                    self._enqueue(arrivals[ai], t)
                    ai += 1
                self._schedule_at_pass(t)
                self._want_tick(t)
                continue
            t, _, kind, event_job = heapq.heappop(ev)
            if kind <= 2:  # a job's event carries the job; a tick (3) and a scheduler pass (4) none
                assert event_job is not None
                j = event_job
            if kind == 0:  # on-prem finish
                del self.running[j.tj.job_id]
                by_end = self.by_end
                del by_end[bisect.bisect_left(by_end, (j.exp_end, j.units, j.tj.job_id))]
                del self.run_jobs[j.tj.job_id]
                self.free += j.units
                if self.users is not None:
                    self.users.end(j.tj.user, j.units)
                if self.placer is not None:
                    self.placer.release(j.placed)
                    j.placed = ()
                self._finish(j, t)
                self._schedule_at_pass(t)
            elif kind == 1:  # cloud finish
                self.run_jobs.pop(j.tj.job_id, None)
                self.leases.pop(j.tj.job_id, None)
                self.lease_list = None
                self._finish(j, t)
            elif kind == 2:  # spot preemption: requeue on-prem
                self.run_jobs.pop(j.tj.job_id, None)
                self.leases.pop(j.tj.job_id, None)
                self.lease_list = None
                j.restarts += 1
                self.requeued[j.tj.job_id] = j
                self._enqueue(j, t)
                self._schedule_at_pass(t)
            elif kind == 4:  # a scheduler pass
                self._passes.discard(t)
                self._schedule(t)
            else:
                self._tick(t)
                if not ev and ai >= na and not self.running and not self.leases and self.queue:
                    self.res.unfinished = len(self.queue)  # nothing left that could ever start them
                    break
            self._want_tick(t)
        self._summarise()
        self.res.wall_s = time.perf_counter() - t0
        self.res.cpu_s = time.process_time() - c0
        return self.res

    def _finish(self, j: SimJob, t: float) -> None:
        j.end = t
        self.done.append(j)

    def _summarise(self) -> None:
        r = self.res
        done = self.done
        w = self.s.warmup_jobs
        if w:
            # Starburst's cut: jobs w .. n - w by arrival order count, the rest warm the site up or drain it
            n = len(self.trace)
            done = [j for j in done if w <= j.idx <= n - w]
            r.warmup_jobs = w
            r.cloud_cost_usd, r.cost_by_market = 0.0, {}
            for j in done:
                for market, usd in j.costs:
                    r.cloud_cost_usd += usd
                    r.cost_by_market[market] = r.cost_by_market.get(market, 0.0) + usd
        r.jobs = len(done)
        r.kept_home_for_data = len(self.kept_for_data)
        if not done:
            return
        waits = sorted(_was(j.last_start) - j.tj.submit for j in done)
        r.jobs_burst = sum(1 for j in done if j.burst)
        r.wait_mean_s, r.wait_p95_s = _mean(waits), _p95(waits)
        r.first_wait_mean_s = _mean([_was(j.first_start) - j.tj.submit for j in done])
        jcts = [_was(j.end) - j.tj.submit for j in done]
        r.jct_mean_s, r.jct_p95_s = _mean(jcts), _p95(sorted(jcts))
        delays = sorted(max(0.0, c - j.tj.runtime) for c, j in zip(jcts, done))
        r.delay_mean_s, r.delay_p95_s = _mean(delays), _p95(delays)
        r.bounded_slowdown_mean = sum(max(1.0, c / max(j.tj.runtime, 10.0)) for c, j in zip(jcts, done)) / len(done)


def checkpoints(job_id: int, share: float) -> bool:
    """Whether this job checkpoints: job ids spread evenly over [0, 1) by the golden ratio."""
    return (job_id * 0.6180339887498949) % 1.0 < share


def _was(t: float | None) -> float:
    """A time every finished job has (its starts, its end); a finished job without one is a simulator bug."""
    if t is None:
        raise ValueError("a finished job has no start or end time")
    return t


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _p95(xs: list[float]) -> float:
    """Nearest-rank 95th percentile of sorted ``xs``."""
    return xs[min(len(xs) - 1, int(math.ceil(0.95 * len(xs))) - 1)] if xs else 0.0
