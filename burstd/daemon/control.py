"""The control facade: everything the control API may ask of the running daemon (queries) and tell it
(commands), in one narrow, typed surface. ``burstd/api/`` speaks HTTP and checks rights; it never reaches into the
reconciler's store, snapshot or decider. Commands record durably and wake the cycle; queries read the store and the
last cycle's snapshot and decisions.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, cast

from burstd.config import Config
from burstd.daemon.data_staging import JobStaging
from burstd.daemon.job_credentials import JobCaller
from burstd.daemon.job_progress import JustStarted, judge, parse_report
from burstd.daemon.job_stories import LIVE_JOB_STATES, JobStories, Live
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.metrics import Metrics
from burstd.daemon.ports import RecordsStore
from burstd.daemon.reconcile import Reconciler
from burstd.domain.daemon_state import PauseState
from burstd.domain.budget import budget_key
from burstd.domain.jobref import JobRef
from burstd.domain.lease import OPEN_STATES, Lease, LeaseEvent, LeaseState
from burstd.domain.money import usd_to_micros
from burstd.domain.preempt_rate import WINDOW_S, PoolRate, checkpoint_view, is_preemption, observed_rate

log = get_logger("control")

JOBS_LOOKBACK_S = 30 * 86400  # burstctl jobs / explain look this far back unless told --since


def _uid_of(user: str) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


class NotReady(RuntimeError):
    """The daemon cannot answer yet (no snapshot, the decider failed): the API says 503 with this text."""


class DaemonControl:
    def __init__(self, rec: Reconciler, config: Config, started_at: float = 0.0):
        self._rec = rec
        # the daemon's store also keeps the event log and the ledger (db.store.Store); the cycle needs less
        self._store = cast(RecordsStore, rec.store)
        self.config = config
        self.started_at = started_at
        self._stories = JobStories(self._store, rec.adapter, config)
        self._just_started = JustStarted(rec.read_jobs)

    @property
    def metrics(self) -> Metrics:
        return self._rec.metrics

    def parity_settings(self) -> dict | None:
        """What a new node's parity gate needs (burstd.agent.gate): the on-prem reference, the site's allowed
        differences and checks, the job Python. None: no reference configured (the gate is open).
        ``NotReady``: the reference file is missing or not a fingerprint."""
        import json

        p = self.config.parity
        if p.reference_file is None:
            return None
        try:
            with open(p.reference_file) as fh:
                reference = json.load(fh)
        except (OSError, ValueError) as exc:
            raise NotReady(f"parity.reference_file {p.reference_file}: {exc}") from None
        if not isinstance(reference, dict) or not all(isinstance(v, str) for v in reference.values()):
            raise NotReady(f"parity.reference_file {p.reference_file}: not a fingerprint "
                           "(make it with burstctl image fingerprint)")
        return {"reference": reference, "allow": list(p.allow), "job_python": p.job_python,
                "checks": [c.model_dump() for c in p.checks]}

    # --- commands: admin (hooks and the agent ask the intake: api.context.IntakePort) ---------------------
    def pause(self, reason: str, by: str) -> PauseState:
        state = self._rec.store.set_pause(True, reason=reason, by=by)
        log.warning("bursting paused", extra=ev(by=by, reason=reason))
        self._rec.wake()
        return state

    def resume(self, by: str) -> PauseState:
        state = self._rec.store.set_pause(False, by=by)
        log.warning("bursting resumed", extra=ev(by=by))
        self._rec.wake()
        return state

    def unprotect(self, pool: str, by: str) -> str:
        """Take ``pool`` out of protected mode; the reason it was in. ``LookupError``: not protected."""
        was = self._rec.health.unprotect(pool)
        log.warning("pool unprotected by admin", extra=ev(by=by, pool=pool, reason=f"was: {was}"))
        self._rec.wake()
        return was

    def gc(self, *, dry_run: bool, grace_s: float | None, pool: str | None, by: str) -> dict[str, Any]:
        """``burstctl cloud gc``: the orphans by the one rule (``providers.orphans.find_orphans``) over the last
        cycle's listings and open leases, judged now; unless ``dry_run``, an orphan sweep queued for the leader
        (``Intake.request_gc``), which terminates them fenced and recorded. ``NotReady``: a dry run before
        this daemon's first cycle listed the clouds (a standby never lists them)."""
        from burstd.providers.orphans import find_orphans

        grace = self.config.daemon.orphan_grace_s if grace_s is None else grace_s
        world = self._rec.last_world
        if world is None and dry_run:
            raise NotReady("this daemon has not listed the clouds yet (a standby never does: ask the leader)")
        if not dry_run:
            self._rec.intake.request_gc(pool, grace, by)
        rows = []
        for name, instances in (world.listings if world is not None else {}).items():
            if pool in (None, name):
                rows += [{"pool": name, "instance_id": o.instance.instance_id, "node": o.instance.node_name,
                          "lease_id": o.instance.lease_id, "reason": o.reason}
                         for o in find_orphans(instances, world.leases if world else (), now=self._rec.clock(),
                                               grace_s=grace)]
        return {"dry_run": dry_run, "queued": not dry_run, "pool": pool, "grace_s": grace, "orphans": rows,
                "listed_at": world.observed_at if world is not None else None}

    def set_budget(self, account: str, usd: Any) -> tuple[int, str | None]:
        """Store ``account``'s budget for this period: (limit in micro-dollars, a warning or None). ``ValueError``
        (nothing written): a bad amount, or an account Slurm's accounting does not know."""
        from burstd.daemon.budgets import slurmdbd_accounts, unknown_account_error, unknown_account_warning
        from burstd.domain.budget import NO_ACCOUNT

        known = slurmdbd_accounts(self._rec.adapter)  # None without slurmdbd; SlurmError if it does not answer
        refused = unknown_account_error(account, known) if account != NO_ACCOUNT else None
        if refused:
            raise ValueError(refused)
        warning = unknown_account_warning(account, self._rec, self.config) if known is None else None
        entry = self._store.set_budget(account, usd, period=self.config.budget.period)
        return entry.limit_micros, warning

    def reconcile_spend(self, since: float | None) -> dict:
        """The spend ledger against slurmdbd's allocations on the cloud nodes (``NoAccounting`` without one)."""
        from burstd.daemon.sacct_check import reconcile_spend

        return reconcile_spend(self._store, self._rec.adapter, self.config, since, now=self._rec.clock())

    # --- queries -----------------------------------------------------------------------------------
    def leases(self, states: Iterable[LeaseState] = OPEN_STATES, *, node: str | None = None) -> list[Lease]:
        return self._rec.store.leases(states=frozenset(states), node=node)

    def lease(self, lease_id: str) -> Lease | None:
        try:
            return self._rec.store.lease(lease_id)
        except Exception:  # noqa: BLE001 - an unknown id (in any store): no lease
            return None

    def lease_for_node(self, node: str) -> Lease | None:
        return self._rec.store.lease_for_node(node)

    def events(self, lease_id: str | None, limit: int) -> list[LeaseEvent]:
        return self._store.events(lease_id=lease_id, limit=limit)

    def spend(self, by: str, since: float | None, until: float | None) -> dict[str, int]:
        rows = self._store.spend(by=by, since=since, until=until)
        return {budget_key(k): v for k, v in rows.items()} if by == "account" else rows

    def jobs(self, *, job: int | None = None, account: str | None = None, user: str | None = None,
             state: str | None = None, since: float | None = None) -> list[dict[str, Any]]:
        """Burst jobs' stories from burstd's records joined with Slurm's accounting (``daemon.job_stories``): the
        jobs that held a node of a lease open now or touched since ``since`` (default: the last
        ``JOBS_LOOKBACK_S``), newest first."""
        since = self._rec.clock() - JOBS_LOOKBACK_S if since is None else since
        told = self._stories.list(since=since, live=self._live(), job=job, account=account, user=user, state=state)
        return [self._with_progress(h.as_dict()) for h in told]

    def _live(self) -> Live:
        return Live(self._rec.last_snapshot, self._rec.requeue_watch.requeued)

    def _with_progress(self, story: dict[str, Any]) -> dict[str, Any]:
        known = self._rec.progress.get(story["job_id"])
        story["progress"] = known.as_dict() if known else None
        return story

    def progress(self) -> list[dict[str, Any]]:
        """The latest training report of every job that sent one (newest first), on-prem and cloud alike."""
        return [p.as_dict() for p in self._rec.progress.all()]

    def record_progress(self, caller: JobCaller, job_id: int, payload: bytes) -> dict[str, Any]:
        """A job's report on itself (``burstd.daemon.job_progress``): ValueError if malformed, ReportRefused if
        the credential does not speak for this job, NotReady before the first snapshot."""
        from burstd.domain.hostlist import expand

        report = parse_report(payload)
        snap = self._rec.last_snapshot
        if snap is None:
            raise NotReady("no Slurm snapshot yet: the first cycle has not run")
        job = next((j for j in snap.jobs if j.job_id == job_id), None)
        if job is None or not job.is_running:  # started since the snapshot? Slurm says (once a job a snapshot)
            job = self._just_started.job(job_id, snap) or job
        names = set(expand(job.nodes)) if job is not None and job.nodes else set()
        nodes = [n for n in snap.nodes if n.name in names]
        judge(caller, report, job_id, job, nodes, _uid_of, self.config.api.progress_require_node)
        assert job is not None
        cloud = [n for n in sorted(names) if self.config.pool_of_node(n) is not None]
        leases = [le for le in (self._rec.store.lease_for_node(n) for n in cloud) if le is not None and le.is_live]
        progress = self._rec.progress.record(job, report, self._rec.clock(),
                                             sum(le.price_per_hour_micros for le in leases), bool(cloud))
        return progress.as_dict()

    def spend_series(self, by: str, since: float | None, until: float | None) -> list[tuple[float, str, int]]:
        series = self._store.spend_series(by=by, since=since, until=until)
        key = budget_key if by == "account" else str
        return [(t, key(k), c) for t, k, c in series]

    def metrics_text(self) -> str:
        return self._rec.metrics.render().decode()

    def status(self) -> dict[str, Any]:
        """Queue pressure, leases by state, cloud nodes, pool health, pause, the last cycle."""
        rec, config = self._rec, self.config
        leases = rec.store.leases(states=OPEN_STATES)
        snap = rec.last_snapshot
        by_node = {lease.node_name: lease for lease in sorted(leases, key=lambda x: x.created_at)}
        clouds = {p.partition for p in config.pools}
        pending = snap.pending if snap else []
        nodes = []
        for n in snap.nodes if snap else ():
            if config.pool_of_node(n.name) is None:
                continue
            lease = by_node.get(n.name)
            nodes.append({"name": n.name, "state": n.state, "flags": list(n.flags),
                          "lease_state": lease.state.value if lease else None,
                          "lease_id": lease.lease_id if lease else None})
        pause = rec.store.pause_state()
        try:
            health: dict = rec.health.status()
        except Exception as exc:  # noqa: BLE001 - status must answer even if the records are unreadable
            health = {"error": str(exc)}
        return {
            "cluster": config.cluster.id,
            "slurmctld": rec.adapter.ctld_health(),  # cli backend: /readyz on 25.11+, else `scontrol ping`
            "paused": rec.paused(),
            "pause": None if pause is None else dataclasses.asdict(pause),
            "ha": None if rec.leadership is None else rec.leadership.status(),  # who leads, since when
            "decider": rec.decider_name,
            "uptime_s": round(rec.clock() - self.started_at, 1) if self.started_at else None,
            "pools": [{"name": p.name, "provider": p.provider, "partition": p.partition,
                       "nodes": f"{p.node_prefix}[1-{p.node_count}]",
                       "price_per_hour_micro_usd": usd_to_micros(p.price_per_hour)}
                      for p in config.pools],
            "leases_by_state": dict(Counter(lease.state.value for lease in leases)),
            "queue": {
                "pending_jobs": len(pending),
                "pending_by_partition": dict(Counter(p for j in pending for p in j.partitions)),
                "burst_eligible_jobs": sum(1 for j in pending if set(j.partitions) & clouds),
                "running_jobs": len(snap.running) if snap else 0,
                "snapshot_at": snap.taken_at if snap else None,
            },
            "nodes": nodes,
            "pool_health": health,
            "last_cycle": rec.last_report.as_dict() if rec.last_report else None,
        }

    def explain(self, job: JobRef) -> dict[str, Any]:
        """Why a job bursts or not, from the last cycle's snapshot and decisions (or the decider run afresh,
        pure, when no cycle has decided yet). ``NotReady``: no snapshot yet, or the decider cannot run."""
        from burstd.policy.explain import explain_job

        rec = self._rec
        snap = rec.last_snapshot
        if snap is None:
            raise NotReady("no Slurm snapshot yet: the first cycle has not run")
        leases = rec.store.leases(states=OPEN_STATES)
        decisions = rec.last_decisions
        if decisions is None:
            try:
                decisions = rec.decider(snap, list(leases), rec.budget_book(), rec.prices(), self.config,
                                        rec.clock())
            except Exception as exc:  # noqa: BLE001 - e.g. PriceError naming a pool
                raise NotReady(f"cannot explain job {job}: {exc}") from None
        answer = explain_job(job, snap, decisions=decisions, leases=leases, config=self.config,
                             now=rec.clock()).as_dict()
        if not answer["found"] and not job.tasks:
            live = self._newer_than_snapshot(job)
            if live:  # submitted (or requeued) after burstd's last look: not "not in the queue"
                answer.update(state=live, reason="newer than burstd's last look at the queue",
                              sentence=f"job {job}: {live} in Slurm, newer than burstd's last look at the queue; "
                                       "ask again after the next cycle")
            else:  # left the queue: burstd's records and sacct's may know it
                self._finished(job, answer)
        held = rec.cloud_gate.why_held(job.job_id) if job.plain else None
        if held:  # burstd's own hold: the rule refuses this job the cloud nodes it asked for (issue 21 item 1)
            answer.update(reason=f"held by burstd: {held}",
                          sentence=f"job {job.job_id}: held by burstd: {held} (released when the rule allows it)")
        answer["held_by_burstd"] = held
        known = rec.progress.get(job.job_id) if job.plain else None
        answer["progress"] = known.as_dict() if known else None
        answer["checkpoint"] = self._checkpoint(job, answer, leases, known.step_time_s if known else None)
        return answer

    def _newer_than_snapshot(self, ref: JobRef) -> str | None:
        """Slurm's state of a job the last snapshot missed, if it is still live (pending, running...)."""
        if not ref.plain:
            return None
        try:
            state = self._rec.adapter.job_state(ref.job_id)
        except Exception:  # noqa: BLE001 - Slurm unreachable: the snapshot's answer stands
            return None
        return state if state in LIVE_JOB_STATES else None

    def _finished(self, ref: JobRef, answer: dict[str, Any]) -> None:
        """A job that left the queue, told from burstd's records joined with Slurm's accounting."""
        told = self._stories.of(ref, since=self._rec.clock() - JOBS_LOOKBACK_S, live=self._live())
        if told is None:
            return
        if "history" in told:
            story = self._with_progress(told["history"].as_dict())
            answer.update(sentence=story["sentence"], reason="not in the queue; burstd's records and Slurm's "
                          "accounting", history=story, outcome=story["outcome"])
        elif "slurm" in told:
            slurm = told["slurm"]
            answer.update(sentence=f"job {slurm.slurm_id}: never on burstd's cloud nodes; {slurm.sentence()}",
                          reason="not in the queue; Slurm's accounting", slurm=slurm.as_dict(),
                          outcome=slurm.outcome)
        else:
            answer.update(sentence=told["note"], reason="not in the queue")

    def _checkpoint(self, ref: JobRef, answer: dict[str, Any], leases: Sequence[Lease],
                    step_time_s: float | None) -> dict[str, Any] | None:
        """The checkpoint interval the job gets on (or bound for) a cloud pool; None on-prem or unknown."""
        found = ref.find(self._rec.last_snapshot.jobs) if self._rec.last_snapshot else []
        job = found[0] if found else None
        by_part = {p.partition: p.name for p in self.config.pools}
        pool = answer.get("pool") or next((le.pool for le in leases if job and job.job_id in le.job_ids
                                           and le.is_live), None)
        if pool is None and job is not None and job.is_running and job.partitions:
            pool = by_part.get(job.partitions[0])
        if pool is None:
            return None
        try:
            return checkpoint_view(self.preempt_rate(pool), nodes=job.node_count if job else 1,
                                   step_time_s=step_time_s)
        except Exception as exc:  # noqa: BLE001 - the rest of explain still answers
            log.warning("checkpoint interval not explained", extra=ev(pool=pool, error=str(exc)))
            return None

    def preempt_rate(self, pool: str) -> PoolRate:
        """``pool``'s preemptions per node-hour over the last week, from its leases and their FAILED events."""
        now = self._rec.clock()
        # touched in the window, and the open ones however old (a node up for weeks is all exposure)
        leases = list({le.lease_id: le for le in [*self._store.leases(pool=pool, since=now - WINDOW_S),
                                                   *self._store.leases(OPEN_STATES, pool=pool)]}.values())
        events = [e for le in leases if le.ready_at is not None
                  for e in self._store.events(lease_id=le.lease_id, limit=1000) if is_preemption(e)]
        return observed_rate(pool, leases, events, now=now)

    def preempt_rate_for_node(self, node: str) -> PoolRate | None:
        """The rate of the pool whose open lease holds ``node``; None when no open lease holds it."""
        lease = self._rec.store.lease_for_node(node)
        if lease is None or lease.state not in OPEN_STATES:
            return None
        return self.preempt_rate(lease.pool)

    def staging_for(self, job_id: int, node: str | None) -> dict[str, Any] | None:
        """What ``burstd-agent stage-in --job`` pulls: the job's staged inputs and its pool's store (None: not
        staged by this daemon, or, with ``node``, the job is neither held by that node's open lease nor seen
        running on it)."""
        stager = self._rec.data_stager
        if stager is None:
            return None
        if node is not None and not self._job_on_node(job_id, node):
            return self._not_seen_yet(job_id, node)
        staged = stager.staged(job_id)
        if staged is None and node is not None:
            staged = self._restage(job_id, node)
        if staged is None:
            return None
        data = next(p.data for p in self.config.pools if p.name == staged.pool)
        return {"job_id": job_id, "pool": staged.pool, "state": staged.state, "error": staged.error,
                "bucket": data.store_bucket, "endpoint": data.store_endpoint, "region": data.store_region,
                "inputs": [{"path": i.path, "dataset": i.dataset} for i in staged.inputs],
                "outputs": [{"path": p, "label": f"out-{n}"} for n, p in enumerate(staged.outputs)]}

    def _not_seen_yet(self, job_id: int, node: str) -> dict[str, Any] | None:
        """A prolog can ask before the daemon has seen its job on the node (Slurm put the job on an idle node of
        the pool; the snapshot is a cycle behind). A job staged for the node's pool that no open lease holds and
        no snapshot shows anywhere: "queued", naming nothing, so the agent asks again rather than run the job
        without its data. A job seen elsewhere stays a 404."""
        stager = self._rec.data_stager
        staged = stager.staged(job_id) if stager is not None else None
        lease = self._rec.store.lease_for_node(node)
        if staged is None or lease is None or lease.state not in OPEN_STATES or lease.pool != staged.pool:
            return None
        snap = self._rec.last_snapshot
        seen = snap.job(job_id) if snap is not None else None
        if (seen is not None and seen.nodes) or any(job_id in x.job_ids for x in self._rec.store.leases(OPEN_STATES)):
            return None
        return {"job_id": job_id, "pool": staged.pool, "state": "queued", "error": "", "bucket": None,
                "endpoint": None, "region": None, "inputs": [], "outputs": []}

    def _restage(self, job_id: int, node: str) -> JobStaging | None:
        """A job on a node that this daemon holds no staging record for (it restarted after deciding): its script
        read again and its inputs queued again (the pool's cache makes that cheap), so the prolog waits for them
        rather than running the job without its data. None: nothing to stage (or the script is unreadable)."""
        from burstd.domain.data_directives import parse_data_directives

        stager, reader = self._rec.data_stager, self._rec.data_needs.reader
        lease, snap = self._rec.store.lease_for_node(node), self._rec.last_snapshot
        job = snap.job(job_id) if snap is not None else None
        if stager is None or reader is None or lease is None or job is None:
            return None
        try:
            needs = parse_data_directives(reader(job_id), source=f"job {job_id}'s batch script")
        except Exception as exc:  # noqa: BLE001 - Slurm said no (DataDirectiveError: a bad script)
            log.warning("job's data not staged again", extra=ev(job_id=job_id, error=str(exc)))
            return None
        stager.submit(job_id, lease.pool, job.account, job.user, needs)
        return stager.staged(job_id)

    def _job_on_node(self, job_id: int, node: str) -> bool:
        from burstd.domain.hostlist import expand

        lease = self._rec.store.lease_for_node(node)
        if lease is not None and lease.state in OPEN_STATES and job_id in lease.job_ids:
            return True
        snap = self._rec.last_snapshot
        job = snap.job(job_id) if snap is not None else None
        return job is not None and node in expand(job.nodes)

    def budgets(self) -> dict[str, Any]:
        """Limits and spend this period, in micro-dollars (``source``: ``set`` through the API, ``config``
        from ``[budget.accounts]``, ``default`` = ``budget.default_account_usd``, ``none`` = may not burst)."""
        from burstd.policy.budget import account_limit

        book = self._rec.budget_book()
        bc = self.config.budget
        stored = {b.account for b in self._store.budgets(bc.period)}

        def source(a: str) -> str:
            return ("set" if a in stored else "config" if a in bc.accounts
                    else "default" if bc.default_account_usd is not None else "none")

        return {
            "period": bc.period, "period_start": book.period_start, "period_end": book.period_end,
            "site": {"limit_micro_usd": book.site_limit_micros, "spent_micro_usd": book.site_spent_micros},
            "burn_rate_cap_micro_usd_per_hour": book.burn_rate_cap_micros_per_hour,
            "default_account_micro_usd": (None if bc.default_account_usd is None
                                          else usd_to_micros(bc.default_account_usd)),
            "accounts": {a: {"limit_micro_usd": account_limit(book, a, self.config),
                             "spent_micro_usd": b.spent_micros, "source": source(a)}
                         for a, b in book.accounts.items()},
        }
