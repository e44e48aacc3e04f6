"""The reconcile cycle: read the world once, plan actions as data, apply them, record.

    leases -> plan_launches -> Executor          (1. a resume call becomes a provider call at once)
    snapshot + listings -> World                 (2. one squeue/sinfo pass and one listing per pool)
    intake's requests -> plan_intents            (3. hooks, agent notices, admin requests)
    World -> plan_leases + plan_orphans          (4. lease vs Slurm vs cloud, both ways)
    decide() -> plan_decisions                   (5. which jobs may burst, and in which market: daemon.markets;
                                                     prices from each provider: daemon.prices)
    SpendAccrual                                 (6. money: allocations and spend up to now)

The pieces live in their own modules: ``daemon.actions`` (what can be done, as data), ``daemon.planning`` (the
pure decision tables), ``daemon.executor`` (the only code with side effects), ``daemon.intake`` (hook, agent
and admin requests) and ``daemon.spend`` (the ledger). Every step is safe to repeat (Karpenter-style
level-triggered reconcile), which is what makes a SIGKILL at any instant harmless (invariant 6):

* intent is durable before any cloud call (REQUESTED, then LAUNCHING committed, then ``launch`` with
  the lease id as idempotency token) -- invariant 1;
* tagged instances with no live lease are terminated after ``orphan_grace_s`` -- invariant 2;
* LAUNCHING/BOOTING past their timeout fail, the node is powered down and its jobs requeued -- 3;
* Slurm node state and lease state are compared both ways every cycle -- 6.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from burstd.config import Config
from burstd.daemon.agent_auth import token_minter
from burstd.daemon.cycle_errors import is_expected, step_failed
from burstd.daemon.data_needs import JobDataNeeds
from burstd.daemon.data_spend import DataSpendLedger
from burstd.daemon.data_staging import DataStager
from burstd.daemon.executor import CycleContext, CycleReport, Executor
from burstd.daemon.failed_launches import SEED_HORIZON_S, SEED_STATES, FailedSpotLaunches
from burstd.faults import crash_point
from burstd.daemon.actions import AddPartition, Intent
from burstd.daemon.associations import SlurmdbdAssociations
from burstd.daemon.cloud_gate import CloudGate
from burstd.daemon.intake import GC, Intake, UnknownNode
from burstd.daemon.job_progress import ProgressBook, ProgressStore
from burstd.daemon.leadership import Elector
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.markets import JobMarkets
from burstd.daemon.metrics import Metrics
from burstd.daemon.planning import (
    World, plan_blocked, plan_decisions, plan_held, plan_intents, plan_launches, plan_leases,
    plan_node_notices, plan_orphans, provider_confirms_notice, unconfirmed_notices, unleased_since,
)
from burstd.daemon.kept_work import kept_work, requeued_since
from burstd.daemon.pools import PoolHealth
from burstd.daemon.requeue_hold import plan_start_now
from burstd.daemon.requeue_watch import RequeueWatch
from burstd.daemon.ports import LeaseStore
from burstd.daemon.prices import ProviderPrices
from burstd.daemon.spend import SpendAccrual
from burstd.domain.leadership import Fence, Fenced
from burstd.domain.budget import BudgetBook, PriceQuote
from burstd.domain.decisions import Decisions
from burstd.domain.lease import FINAL_STATES, OPEN_STATES, Lease, LeaseState
from burstd.domain.money import MICROS_PER_USD
from burstd.domain.slurm import Job, Snapshot
from burstd.policy.budget import account_limit, burn_cap, guard_launch, launch_seconds, validate_quote
from burstd.policy.data_cost import DataView
from burstd.policy.decide import decide
from burstd.policy.eligibility import Eligibility
from burstd.policy.prices import SpotAdvisor
from burstd.providers.base import Instance, Provider
from burstd.slurm.base import SlurmAdapter
from burstd.domain.hostlist import HostlistError, expand

__all__ = ["Decider", "Reconciler", "UnknownNode"]

log = get_logger("reconcile")
S = LeaseState


class Decider(Protocol):
    """``burstd.policy.decide.decide``'s shape: which jobs may burst, as pure data."""

    def __call__(self, snapshot: Snapshot, leases: Sequence[Lease], budgets: BudgetBook | None,
                  prices: dict, config: Config, now: float, *,
                  progress: Mapping[int, float] | None = None, data: DataView | None = None,
                  failed_spot_launches: Mapping[int, int] | None = None) -> Decisions: ...


def _advisor(config: Config) -> SpotAdvisor | None:
    """The Spot Advisor snapshot named by ``cloud.spot_advisor_file`` (interruption priors), or None."""
    if not config.cloud.spot_advisor_file:
        return None
    try:
        return SpotAdvisor.load(config.cloud.spot_advisor_file)
    except ValueError as exc:  # the daemon does not start on a file it cannot use: the admin named it
        raise ValueError(f"cloud.spot_advisor_file: {exc}") from None


class Reconciler:
    def __init__(self, config: Config, store: LeaseStore, adapter: SlurmAdapter, providers: dict[str, Provider],
                 decider: Decider = decide, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time, decider_name: str = "", health: PoolHealth | None = None,
                 leadership: Elector | None = None):
        self.config = config
        self.store = store
        self.adapter = adapter
        self.providers = providers
        self.decider = decider
        self.decider_name = decider_name or ("policy" if decider is decide else getattr(decider, "__name__", "decide"))
        self.metrics = metrics or Metrics()
        self.metrics.setup([p.name for p in config.pools], config.daemon.launch_timeout_s,
                           config.daemon.boot_timeout_s, None)  # the burn cap is set from the budget book each cycle
        self.clock = clock
        # active/standby (docs/ha.md): None = the only daemon, it always acts
        self.leadership = leadership
        self.on_wake: Callable[[], None] = lambda: None
        self.last_snapshot: Snapshot | None = None
        self._unconfirmed_seen: set[tuple[str, str]] = set()  # (node, reason) of unconfirmed preemption hints
        self.last_decisions: Decisions | None = None
        self.last_report: CycleReport | None = None
        self.last_world: World | None = None  # what the last cycle saw (``burstctl cloud gc --dry-run`` reads it)
        self.markets = JobMarkets(store)  # the market decided per job: read by the intake, written by the cycle
        self.intake = Intake(config, store, clock, lambda: self.last_snapshot, self.wake, self.markets,
                             read_jobs=self.read_jobs)
        # who may use cloud nodes (decide()'s gates too) and whom slurmdbd lets a budget be charged for
        self.eligibility = Eligibility.of(config)
        self.associations = SlurmdbdAssociations(adapter, clock)
        # the same rule for jobs that reach a cloud node already up (partition accounts, holds)
        self.cloud_gate = CloudGate(config, adapter, self.eligibility, self.associations, clock)
        self.failed_jobs: dict[int, float] = {}
        self.failed_spot_launches = FailedSpotLaunches()  # per job, for the escalation (burstd.daemon.failed_launches)
        # what training jobs report about themselves (burstd.daemon.job_progress), kept in the database where the
        # store has a place for it (a unit test's fake may not)
        self.progress = ProgressBook(store=store if isinstance(store, ProgressStore) else None)
        self.requeue_watch = RequeueWatch()  # requeues of cloud jobs burstd did not make (the templates' own)
        self._our_requeues: set[int] = set()  # burstd's requeues since the watch last looked
        self.unleased: dict[str, float] = {}  # planning.unleased_since: drift repair waits for the resume call
        self.health = health if health is not None else PoolHealth(store, config, clock)
        self.spend = SpendAccrual(store, config.budget.accrual_interval_s, self.metrics)
        # each pending job's data directives, read from its batch script (issue 24; docs/researchers.md)
        self.data_needs = JobDataNeeds(getattr(adapter, "batch_script", None))
        # a bursting job's declared inputs pushed near its pool, on a worker (pools with a store_bucket)
        self.data_stager = DataStager(config, store, self.metrics) if isinstance(store, DataSpendLedger) and any(
            p.data.store_bucket for p in config.pools) else None
        # every pool's offerings and prices from its provider, cached (the one place that reads spot prices)
        advisor = _advisor(config)
        self.price_book = ProviderPrices(providers, clock, advisor=advisor)
        self.price_source: Callable[[Config], dict] = self.price_book.quotes
        # the only code with side effects: built once, each cycle's snapshot, fence and report passed to apply()
        self.executor = Executor(store, adapter, providers, config, self.metrics, clock=clock, health=self.health,
                                 hook_started=self.intake.hook_started, failed_jobs=self.failed_jobs,
                                 markets=self.markets, failed_spot_launches=self.failed_spot_launches,
                                 agent_token=token_minter(config.daemon.state_dir))

    def wake(self) -> None:
        self.on_wake()

    def paused(self) -> bool:
        """An admin's pause or resume (``burstctl pause``), else the config's ``policy.paused``."""
        try:
            state = self.store.pause_state()
        except Exception as exc:  # noqa: BLE001 - a database hiccup must not stop the loop: the config decides
            step_failed(log, "pause state unreadable", exc, self.metrics)
            state = None
        return self.config.policy.paused if state is None else state.paused

    # --- the cycle ----------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        """One reconcile cycle if this daemon leads (or is the only one); a standby only refreshes its snapshot
        for the read API and the intake. A deposed leader's first fenced write ends the cycle (``Fenced``)."""
        t0 = time.perf_counter()
        report = CycleReport(started_at=self.clock(), decider=self.decider_name)
        fence = None
        if self.leadership is not None:
            fence = self.leadership.fence
            report.role = "leader" if fence is not None else "standby"
            if fence is None:
                self._standby_cycle(report, t0)
                return report
        try:
            return self._lead_cycle(report, t0, fence)
        except Fenced as exc:
            assert self.leadership is not None  # only a fenced Executor raises it
            self.leadership.deposed(str(exc))
            report.role = "deposed"
            report.errors.append(str(exc))
            report.duration_s = time.perf_counter() - t0
            self.last_report = report
            return report

    def _standby_cycle(self, report: CycleReport, t0: float) -> None:
        self.failed_spot_launches.unseed()  # the leader counts meanwhile: rebuilt from the store when leading
        self.progress.current = False  # jobs may report to the leader meanwhile: read again when leading
        try:
            self.last_snapshot = self.adapter.snapshot()
        except Exception as exc:  # noqa: BLE001 - the standby's reads are best effort
            report.errors.append(f"snapshot: {exc}")
            if not is_expected(exc):  # Slurm out of a standby's reach is quiet; a bug is not
                step_failed(log, "slurm snapshot failed (standby)", exc, self.metrics)
        report.duration_s = time.perf_counter() - t0
        self.last_report = report

    def _lead_cycle(self, report: CycleReport, t0: float, fence: Fence | None) -> CycleReport:
        now = self.clock()
        if not self.failed_spot_launches.seeded:  # a restart or a takeover: the failures the store recorded
            try:
                self.failed_spot_launches.seed(self.store.leases(states=SEED_STATES, since=now - SEED_HORIZON_S))
            except Exception as exc:  # noqa: BLE001 - a database hiccup: counted from here on, seeded next cycle
                step_failed(log, "failed launches unreadable", exc, self.metrics)
        if not self.progress.current:  # a takeover: the reports the other daemon took, from the store
            try:
                self.progress.reload()
            except Exception as exc:  # noqa: BLE001 - a database hiccup: what this daemon knows, read again next cycle
                step_failed(log, "job progress unreadable", exc, self.metrics)
        for job_id in [j for j, t in self.failed_jobs.items() if now - t > 3600]:
            del self.failed_jobs[job_id]
        ex, cycle = self.executor, CycleContext(report, self.last_snapshot, fence)
        paused = self.paused()

        # 1. launches first: a resume call becomes a provider call without waiting for Slurm reads
        with self.intake.lock:  # a resume call records a gang's leases under this lock: see all of them or none
            leases = self.store.leases(states=OPEN_STATES)
        ex.apply(plan_launches(leases, paused=paused, refusal=self._refusal_fn(leases)), cycle)

        # 2. read the world once
        observed_at = self.clock()
        snapshot = None
        try:
            snapshot = self.adapter.snapshot()
        except Exception as exc:  # noqa: BLE001
            report.errors.append(f"snapshot: {exc}")
            step_failed(log, "slurm snapshot failed", exc, self.metrics)
        listings: dict[str, tuple[Instance, ...]] = {}
        for name, provider in self.providers.items():
            try:
                listings[name] = tuple(provider.list_instances())
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"list_instances({name}): {exc}")
                step_failed(log, "provider listing failed", exc, self.metrics, pool=name)
        crash_point("cycle.after_snapshot")
        if snapshot is not None:
            self.last_snapshot = snapshot
            cycle = cycle.with_snapshot(snapshot)
            self._watch_requeues(snapshot, self._our_requeues | set(report.requeued))
            self.metrics.set_training(self.progress.running(j.job_id for j in snapshot.jobs if j.is_running))
        watched = len(report.requeued)

        # 3. hook / agent / admin intents (kept in the store until applied); orphan sweeps wait for step 4
        intents = self.intake.pending()
        sweeps = [i for i in intents if i.kind == GC]
        intents = [i for i in intents if i.kind != GC]
        leases = self.store.leases(states=OPEN_STATES)
        # plus the notices the agent left in Slurm node reasons (not queued: read again every cycle)
        # (hints only: the provider must confirm them, issue 21 item 6)
        confirmed = provider_confirms_notice(listings)
        self._warn_unconfirmed(unconfirmed_notices(leases, snapshot, confirmed), snapshot)
        ex.apply(plan_intents([*intents, *plan_node_notices(leases, snapshot, confirmed)], leases, snapshot,
                                 listings), cycle)
        crash_point("cycle.after_intents")
        if intents:
            try:
                self.intake.applied(intents)
            except Exception as exc:  # noqa: BLE001 - applied again next cycle: harmless
                report.errors.append(f"intents: {exc}")
                step_failed(log, "applied intents not forgotten", exc, self.metrics)

        # 4. leases vs Slurm vs provider, and orphans
        now, open_leases = self.clock(), tuple(self.store.leases(states=OPEN_STATES))
        self.unleased = unleased_since(snapshot, open_leases, self.unleased, now)
        world = World(now, observed_at, snapshot, listings, open_leases, self.unleased)
        self.last_world = world
        with self.intake.lock:  # CreateLease must not race a resume call for the same node
            ex.apply(plan_leases(world, self.config), cycle)
        ex.apply(plan_orphans(world, self.config, [self.intake.sweep_of(i) for i in sweeps]), cycle)
        # a sweep is done once every pool it names was listed (a failed listing: the next cycle sweeps again)
        done = [i for i in sweeps if all(world.listed(p) for p in self._sweep_pools(i))]
        if done:
            try:
                self.intake.applied(done)
            except Exception as exc:  # noqa: BLE001 - swept again next cycle: harmless
                report.errors.append(f"intents: {exc}")
                step_failed(log, "applied sweeps not forgotten", exc, self.metrics)

        # 5. decide which jobs may burst, and do it
        if snapshot is not None:
            # pools that cannot launch now send their pending jobs on-prem; held failed launches run again
            blocked = self._blocked()
            ex.apply(plan_blocked(snapshot, blocked, self.config), cycle)
            ex.apply(plan_held(snapshot, self.failed_jobs), cycle)
            ex.apply(plan_start_now(snapshot, (p.partition for p in self.config.pools), self.clock()), cycle)
            try:
                report.errors += self.cloud_gate.run(snapshot, self._budget_book())
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"cloud gate: {exc}")
                step_failed(log, "cloud gate failed", exc, self.metrics)
            cfg = self.config if not paused or self.config.policy.paused else self.config.model_copy(
                update={"policy": self.config.policy.model_copy(update={"paused": True})})
            try:
                args = (snapshot, list(self.store.leases(states=OPEN_STATES)), self._budget_book(), self._prices(),
                        cfg, self.clock())
                # the policy's own decide() weighs the work a requeued job kept (Uniform Progress: what a training
                # job reported, else whole checkpoint intervals of its earlier runs, as the replay counts) and
                # each job's declared data; a spot launch that found no capacity counts toward the escalation
                progress = {**self._kept_work(snapshot), **self.progress.work_done_s()}
                decisions = self.decider(*args, progress=progress, data=self.data_needs.view(snapshot),
                                         failed_spot_launches=self.failed_spot_launches.counts())
                self.last_decisions = decisions
                self.metrics.kept_home_for_data.set(len(decisions.kept_home_for_data))
                self._stage_inputs(decisions, snapshot)
                ex.apply([a for a in plan_decisions(decisions, self.config, blocked, self.markets.recorded())
                          if not self._gate_refuses(a, snapshot)], cycle)
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"decide: {exc}")
                step_failed(log, "decide failed", exc, self.metrics)
            self.markets.prune(j.job_id for j in snapshot.jobs)
            self.failed_spot_launches.prune(j.job_id for j in snapshot.jobs)  # no launch in flight: apply() waited
            self._pressure(snapshot, report)

        # 6. a new REQUESTED lease from drift repair launches in this same cycle
        with self.intake.lock:
            leases = self.store.leases(states=OPEN_STATES)
        if any(lease.state == S.REQUESTED for lease in leases):
            ex.apply(plan_launches(leases, paused=paused, refusal=self._refusal_fn(leases)), cycle)

        self._lease_metrics()
        # 7. the spend ledger: allocations from this snapshot, spend of every lease up to now
        try:
            report.errors += self.spend.run(snapshot, observed_at, fence=fence)  # per-lease failures: in the list
        except Fenced:
            raise
        except Exception as exc:  # noqa: BLE001 - the leases unreadable: the next cycle accrues it all
            report.errors.append(f"spend: {exc}")
            step_failed(log, "spend accrual failed", exc, self.metrics)
        self._money_metrics()
        self._our_requeues = set(report.requeued[watched:])
        report.duration_s = time.perf_counter() - t0
        self.metrics.cycle_seconds.observe(report.duration_s)
        self.metrics.last_cycle.set(time.time())  # wall time, for the "cycle stalled" alert
        self.last_report = report
        if report.actions:
            log.info("cycle", extra=ev(duration_s=round(report.duration_s, 4), actions=report.actions,
                                       errors=len(report.errors)))
        if report.again:
            self.wake()
        return report

    def _gate_refuses(self, action: object, snapshot: Snapshot) -> bool:
        """An AddPartition the cloud gate would undo next cycle (a pair slurmdbd does not associate: decide()
        does not ask slurmdbd): not made, so the job never flaps between partitions."""
        if not isinstance(action, AddPartition) or (job := snapshot.job(action.job_id)) is None:
            return False
        pool = self.cloud_gate.pools.get(action.partition)
        return pool is not None and self.cloud_gate.refusal(pool, job) is not None

    def _stage_inputs(self, decisions: Decisions, snapshot: Snapshot) -> None:
        """Queue the inputs of each job decided to burst with a data move (the worker moves them, not the cycle)."""
        if self.data_stager is None:
            return
        for jid, move in decisions.data_moves.items():
            job, needs = snapshot.job(jid), self.data_needs.known.get(jid)
            if job is not None and needs is not None:
                self.data_stager.submit(jid, move.pool, job.account, job.user, needs)
        self.data_stager.forget({jid for jid in self.data_stager.jobs} - {j.job_id for j in snapshot.jobs})

    def _sweep_pools(self, intent: Intent) -> list[str]:
        """The pools a sweep names that this daemon can list (a pool since removed from the config: none)."""
        pool = self.intake.sweep_of(intent).pool
        return [p for p in self.providers if pool in (None, p)]

    # --- inputs for the guard and the decider -------------------------------------------------
    def budget_book(self) -> BudgetBook:
        """The budget book as the decider sees it (also for ``/v1/explain``)."""
        return self._budget_book()

    def prices(self) -> dict:
        """This cycle's validated price quotes (also for ``/v1/explain``)."""
        return self._prices()

    def _budget_book(self) -> BudgetBook:
        return self.store.budget_book(self.config.budget.period, self.clock(), self.config)

    def _prices(self) -> dict[tuple[str, str], PriceQuote]:
        """This cycle's price quotes: ``self.price_source(config)`` (default: each provider's offerings and prices,
        cached, through ``burstd.daemon.prices.ProviderPrices``), each checked by ``validate_quote``. A NaN, infinite or negative
        price raises ``PriceError`` naming the pool: the decider is not run and launches are refused."""
        quotes = dict(self.price_source(self.config))
        for q in quotes.values():
            validate_quote(q)
        return quotes

    def _kept_work(self, snapshot: Snapshot) -> dict[int, float]:
        """What each requeued job kept from its earlier cloud runs, as the replay tells decide()."""
        since = requeued_since(snapshot)
        if since is None:
            return {}
        ended = self.store.leases(states=FINAL_STATES | {S.FAILED}, since=since)
        return kept_work(snapshot, ended, self.config.policy.checkpoint_interval_s)

    def _blocked(self) -> dict[str, str]:
        try:
            return self.health.blocked()
        except Exception as exc:  # noqa: BLE001
            step_failed(log, "pool health unreadable", exc, self.metrics)
            return {}

    def read_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        """The jobs among ``job_ids`` as Slurm has them now: ``squeue -j`` where the backend can, else a
        snapshot."""
        read = getattr(self.adapter, "jobs_of", None)
        if read is not None:
            return list(read(job_ids))
        wanted = set(job_ids)
        return [j for j in self.adapter.snapshot().jobs if j.job_id in wanted]

    def _who_may_not(self, lease: Lease, jobs: Mapping[int, Job]) -> str | None:
        """Why a lease's jobs may not run on cloud nodes at all or charge its account: the exclusions and pool
        restrictions ``decide()`` applies (``Eligibility``) and slurmdbd's associations, for every job the lease
        was asked for (read at the hook, or in the last snapshot); the lease's account when none is known."""
        known = [job for jid in lease.job_ids
                 if (job := jobs.get(jid) or self.intake.fresh_jobs.get(jid)) is not None]
        facts = [(j.account, j.user, j.qos) for j in known] or [(lease.account, "", "")]
        for account, user, qos in facts:
            why = (self.eligibility.refusal(lease.pool, account, user, qos)
                   or self.associations.refusal(user, account))
            if why:
                return why
        return None

    def _refusal_fn(self, leases: Sequence[Lease]) -> Callable[[Lease], str | None]:
        """The launch guard for this pass: who may use the pool (``_who_may_not``), then the budget
        (``burstd.policy.budget.guard_launch``), or why a pool takes no launches now. Leases approved in this
        pass count as committed for the next ones."""
        jobs: dict[int, Job] = {j.job_id: j for j in (self.last_snapshot.jobs if self.last_snapshot else ())}
        live = [lease for lease in leases if lease.is_live]
        state: dict[str, Any] = {}

        def refusal(lease: Lease) -> str | None:
            if (why := self._who_may_not(lease, jobs)) is not None:
                return why
            if "blocked" not in state:
                state["blocked"] = self._blocked()
            if lease.pool in state["blocked"]:
                return state["blocked"][lease.pool]
            if "book" not in state:
                state["book"] = self._budget_book()
            try:
                prices = state["prices"] if "prices" in state else state.setdefault("prices", self._prices())
            except ValueError as exc:  # PriceError: a NaN/negative price from the price source: no launch
                log.error("price refused", extra=ev(lease_id=lease.lease_id, pool=lease.pool, error=str(exc)))
                return f"no valid price for pool {lease.pool}: {exc}"
            known = {j: jobs.get(j) or self.intake.fresh_jobs.get(j) for j in lease.job_ids}
            limit_min = max((job.time_limit_min or 60 for job in known.values() if job is not None), default=60)
            verdict = guard_launch(state["book"], live, jobs.values(), account=lease.account,
                                   price_per_hour_micros=lease.price_per_hour_micros, nodes=1,
                                   seconds=launch_seconds(limit_min * 60.0, self.config), now=self.clock(),
                                   config=self.config, prices=prices)
            if verdict.ok:
                live.append(dataclasses.replace(lease, state=S.LAUNCHING))
                return None
            return verdict.reason

        return refusal

    def _warn_unconfirmed(self, nodes: Sequence[str], snapshot: Snapshot | None) -> None:
        """Say once per node and reason that a preemption reason went unheeded: nothing confirmed it."""
        for node in nodes:
            n = snapshot.node(node) if snapshot is not None else None
            key = (node, n.reason if n is not None else "")
            if key not in self._unconfirmed_seen:
                self._unconfirmed_seen.add(key)
                log.warning("preemption reason not acted on: neither the agent nor the provider confirms it",
                            extra=ev(node=node, reason=key[1]))
        if len(self._unconfirmed_seen) > 10_000:  # a flood of forged reasons must not grow memory for ever
            self._unconfirmed_seen.clear()

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

    def _watch_requeues(self, snapshot: Snapshot, ours: set[int]) -> None:
        """Count the requeues of cloud jobs that burstd did not make (``burstd.daemon.requeue_watch``)."""
        def on_cloud(job: Job) -> bool:
            try:
                return any(self.config.pool_of_node(n) is not None for n in expand(job.nodes))
            except HostlistError:
                return False

        self.metrics.jobs_requeued.inc(self.requeue_watch.observe(snapshot.jobs, on_cloud, ours))

    def _lease_metrics(self) -> None:
        counts: dict[tuple[str, str], int] = {(s.value, p.name): 0 for s in OPEN_STATES for p in self.config.pools}
        oldest: dict[tuple[str, str], float] = {}
        now = self.clock()
        for lease in self.store.leases(states=OPEN_STATES):
            key = (lease.state.value, lease.pool)
            counts[key] = counts.get(key, 0) + 1
            oldest[key] = max(oldest.get(key, 0.0), now - lease.state_since)
        self.metrics.set_leases(counts, oldest)
        try:
            for pool, h in self.health.status().items():
                self.metrics.pool_protected.labels(pool).set(1 if isinstance(h, dict) and h.get("protected") else 0)
        except Exception as exc:  # noqa: BLE001 - a metrics read must not stop the loop
            step_failed(log, "pool protection metrics not read", exc, self.metrics)

    def _money_metrics(self) -> None:
        """Budget and spend this period per account, and the burn rate of the live leases (dollars)."""
        try:
            book = self._budget_book()
            self.metrics.burn_cap.set(_inf_if_none(burn_cap(book, self.config)))
            live = [le for le in self.store.leases(states=OPEN_STATES) if le.is_live]
            self.metrics.set_money({a: account_limit(book, a, self.config) for a in book.accounts},
                                   {a: b.spent_micros for a, b in book.accounts.items()},
                                   sum(le.price_per_hour_micros for le in live))
        except Exception as exc:  # noqa: BLE001 - a metrics read must not stop the loop
            step_failed(log, "money metrics not read", exc, self.metrics)


def _inf_if_none(micros: int | None) -> float:
    return float("inf") if micros is None else micros / MICROS_PER_USD
