"""``GET /v1/jobs`` and the story ``GET /v1/explain`` tells of a job that left the queue: burstd's records read from
the store, Slurm's accounting read through the adapter (``sacct -D``, every run), both joined by the pure
``burstd.report.job_history`` and ``burstd.report.job_accounting``. Where Slurm has no slurmdbd (or the backend
cannot read it) or sacct fails, the stories say so and carry burstd's records alone.

    stories = JobStories(store, adapter, config)
    stories.list(since=..., account="chem", live=Live(snapshot, watch.requeued))
    stories.of(parse_job_ref("1234_5"), since=..., live=...)  # an array task by the id Slurm gives it
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from burstd.config import Config
from burstd.daemon.ports import RecordsStore
from burstd.domain.jobref import JobRef
from burstd.domain.lease import OPEN_STATES, LeaseState
from burstd.domain.sacct import SacctJob
from burstd.domain.slurm import Snapshot
from burstd.report.job_accounting import REQUEUE_STATES, join_accounting, run_order, slurm_account
from burstd.report.job_history import JobHistory, job_histories, select_histories
from burstd.slurm.base import SlurmAdapter, SlurmError

MAX_JOB_LEASES = 5000  # the newest leases read (each one is an allocations and an events query)
SACCT_BATCH = 200  # job ids per sacct call (its command line stays short)
SACCT_MARGIN_S = 86400  # sacct is asked from a day before the window: a job's earlier (on-prem) runs too
MAX_SETTLED = 20_000  # finished jobs whose sacct runs are kept (they never change): --watch asks sacct less
# a job in one of these states is still in Slurm's queue (squeue's words): its record may still change (never kept
# as settled), and explain says so rather than "not in the queue"
LIVE_JOB_STATES = REQUEUE_STATES | {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING",
                                    "STAGE_OUT", "SIGNALING", "STOPPED"}
NO_ACCOUNTING = "no slurmdbd to ask (AccountingStorageType is not slurmdbd, or slurm.backend is not cli): outcome unknown"


@dataclass(frozen=True)
class Live:
    """What the daemon knows now of jobs Slurm still lists: its last snapshot (``restart_count``) and the
    requeues its watch counted that burstd did not make (``daemon.requeue_watch``)."""

    snapshot: Snapshot | None = None
    requeued_itself: Mapping[int, int] = field(default_factory=dict)

    def restarts(self, histories: Iterable[JobHistory]) -> dict[int, int]:
        counted = {j.job_id: j.restart_count for j in self.snapshot.jobs} if self.snapshot else {}
        return {h.job_id: max(counted.get(h.job_id, 0), h.requeued_by_burstd + self.requeued_itself.get(h.job_id, 0))
                for h in histories}


class JobStories:
    def __init__(self, store: RecordsStore, adapter: SlurmAdapter, config: Config):
        self._store, self._adapter, self._config = store, adapter, config
        self._settled: dict[int, list[SacctJob]] = {}  # job -> its runs, for jobs whose last run is final
        self._lock = threading.Lock()  # the API answers readers on several threads

    # --- burstd's records -------------------------------------------------------------------------------
    def histories(self, since: float, job: int | None = None) -> list[JobHistory]:
        """The jobs that held a node of a lease open now or touched since ``since`` (only ``job``'s if given)."""
        store = self._store
        leases = {le.lease_id: le for le in [*store.leases(since=since, limit=MAX_JOB_LEASES),
                                              *store.leases(states=OPEN_STATES)]}
        allocations = {lid: store.allocations(lid) for lid in leases}
        if job is not None:  # one job: only the leases it held (fewer event reads)
            leases = {lid: le for lid, le in leases.items()
                      if job in le.job_ids or any(a.job_id == job for a in allocations[lid])}
        events = [e for lid in leases for e in store.events(lease_id=lid, limit=10_000)
                  if e.to_state == LeaseState.FAILED]
        first = min((le.created_at for le in leases.values()), default=since)
        return job_histories(leases.values(), allocations, store.spend_intervals(since=first), events,
                             store.data_spend(since=first))

    # --- Slurm's accounting -----------------------------------------------------------------------------
    def slurm_runs(self, refs: Sequence[JobRef], since: float) -> tuple[list[SacctJob] | None, str]:
        """sacct's runs of ``refs`` (None and why where there is no accounting to read)."""
        try:
            if not self._adapter.accounting_enabled():
                return None, NO_ACCOUNTING
            with self._lock:
                wanted = [r for r in refs if not (r.plain and r.job_id in self._settled)]
                rows = [row for r in refs if r.plain for row in self._settled.get(r.job_id, ())]
            for i in range(0, len(wanted), SACCT_BATCH):
                fresh = self._adapter.sacct_jobs(since - SACCT_MARGIN_S, jobs=wanted[i:i + SACCT_BATCH])
                self._settle(fresh)
                rows += fresh
        except SlurmError as exc:
            return None, f"sacct did not answer ({exc}): outcome unknown"
        return rows, ""

    def _settle(self, rows: Iterable[SacctJob]) -> None:
        by_job: dict[int, list[SacctJob]] = {}
        for row in rows:
            by_job.setdefault(row.job_id, []).append(row)
        with self._lock:
            for job_id, runs in by_job.items():
                last = max(runs, key=run_order)
                if last.end is not None and last.state not in LIVE_JOB_STATES:
                    self._settled[job_id] = runs
            while len(self._settled) > MAX_SETTLED:
                del self._settled[next(iter(self._settled))]

    def _joined(self, histories: list[JobHistory], rows: list[SacctJob] | None, note: str,
                live: Live) -> list[JobHistory]:
        return join_accounting(histories, rows, self._cloud_nodes(), note=note, restarts=live.restarts(histories))

    def _cloud_nodes(self) -> set[str]:
        return {n for p in self._config.pools for n in p.node_names}

    # --- the two questions ------------------------------------------------------------------------------
    def list(self, *, since: float, live: Live, job: int | None = None, account: str | None = None,
             user: str | None = None, state: str | None = None) -> list[JobHistory]:
        """``burstctl jobs``: the stories matching the filters, newest first, each joined with sacct."""
        chosen = select_histories(self.histories(since, job), job=job, account=account, user=user, state=state,
                                  since=since)
        rows, note = self.slurm_runs([JobRef(h.job_id) for h in chosen], since) if chosen else ([], "")
        return self._joined(chosen, rows, note, live)

    def of(self, ref: JobRef, *, since: float, live: Live) -> dict[str, Any] | None:
        """``burstctl explain`` of a job that left the queue: ``{"history": story}`` (burstd ran it on a cloud
        node), ``{"slurm": record}`` (Slurm's accounting knows it, burstd does not), ``{"note": why}`` (an array
        task or het component whose job id only slurmdbd knows, and none to ask), or None: nobody knows it."""
        rows, note = self.slurm_runs([ref], since)
        if ref.plain:
            ids = {ref.job_id}
        elif rows is None:
            return {"note": f"job {ref}: not in the queue; {note}, and burstd keeps a job by its own id, so it "
                            "cannot tell which job this array task or het component ran as"}
        else:
            ids = {r.job_id for r in rows if _names(ref, r)}
        mine = [r for r in rows or () if r.job_id in ids]
        for job_id in sorted(ids):
            stories = self.histories(since, job_id)
            told = select_histories(stories, job=job_id)
            if told:
                return {"history": self._joined(told, mine if rows is not None else None, note, live)[0]}
        if mine:
            return {"slurm": slurm_account(mine[0].job_id, mine, self._cloud_nodes())}
        return None


def _names(ref: JobRef, row: SacctJob) -> bool:
    """Is ``row`` (one of sacct's answers to ``--jobs=ref``) the task or component ``ref`` names? sacct -P has no
    array fields: there sacct's own selection is taken as it is."""
    if ref.task is not None and row.array_job_id is not None:
        return (row.array_job_id, row.array_task_id) == (ref.job_id, ref.task)
    return True
