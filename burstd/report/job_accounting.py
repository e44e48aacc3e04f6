"""A burst job's story (``burstd.report.job_history``) joined with what Slurm's accounting recorded of it
(slurmdbd, ``sacct -D``: one record a run): the job's outcome as Slurm records it (COMPLETED, FAILED, TIMEOUT,
CANCELLED, NODE_FAIL, PREEMPTED... of its last run), every run with the nodes it used (cloud or on-prem), and the
requeues burstd did not make itself (a training job that checkpoints on a preemption notice and requeues itself:
burstd requeues nothing, so its own records count none).

    stories = join_accounting(job_histories(...), adapter.sacct_jobs(since, jobs=refs), cloud_nodes,
                              restarts={job: restart_count})
    stories[0].sentence()  # job 42 (...): ran on cloud1 (...), preempted once, requeued once, cost $1.60;
                           # Slurm: COMPLETED after 2 runs: REQUEUED on cloud1 (cloud), then COMPLETED on onprem1 ...

Pure: burstd's stories and sacct's rows in, the joined stories out. Where there is no accounting to read (no
slurmdbd, a backend that cannot read it, sacct failing), ``rows`` is None and the note says so in each story.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from burstd.domain.sacct import SacctJob
from burstd.report.job_history import JobHistory, Run

#: a run after which Slurm put the job back in the queue (``scontrol requeue``, a preemption or a lost node with
#: requeue): the record of that run keeps this state, and a new record starts with the next run
REQUEUE_STATES = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: a run cut short with the node: requeued, preempted, or its node failed
CUT_SHORT = REQUEUE_STATES | {"PREEMPTED", "NODE_FAIL"}


@dataclass(frozen=True, slots=True)
class SlurmRun:
    """One run of the job as slurmdbd recorded it."""

    state: str
    start: float | None
    end: float | None
    nodes: tuple[str, ...]
    cloud: bool  # on one of burstd's cloud nodes

    @property
    def side(self) -> str:
        return "cloud" if self.cloud else "on-prem" if self.nodes else "no node"

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "start": self.start, "end": self.end, "nodes": list(self.nodes),
                "side": self.side}


@dataclass(frozen=True, slots=True)
class SlurmAccount:
    """What Slurm's accounting says of one job: its runs, oldest first; ``note`` says why there are none."""

    slurm_id: str  # as Slurm writes it: 1234_5 for an array task
    runs: tuple[SlurmRun, ...] = ()
    note: str = ""

    @property
    def outcome(self) -> str | None:
        """The state of its last run (None: no record)."""
        return self.runs[-1].state if self.runs else None

    @property
    def requeues(self) -> int:
        """Runs that sent it back to the queue: each one followed by another run, or recorded as requeued (a job
        requeued and then cancelled while pending gets no record of its own)."""
        return sum(1 for i, r in enumerate(self.runs) if i < len(self.runs) - 1 or r.state in REQUEUE_STATES)

    def as_dict(self) -> dict[str, Any]:
        return {"source": "sacct" if self.runs else None, "outcome": self.outcome, "run_count": len(self.runs),
                "requeues": self.requeues, "runs": [r.as_dict() for r in self.runs], "note": self.note}

    def sentence(self) -> str:
        if not self.runs:
            return f"Slurm's accounting: {self.note}"
        runs = ", then ".join(f"{r.state} on {','.join(r.nodes) or 'no node'} ({r.side})" for r in self.runs)
        return f"Slurm: {self.outcome} after {len(self.runs)} runs: {runs}" if len(self.runs) > 1 else f"Slurm: {runs}"


def run_order(row: SacctJob) -> tuple[bool, float]:
    return row.start is None, row.start or 0.0  # a run not started yet (pending again) is the latest


def _overlaps(run: Run, row: SlurmRun) -> bool:
    inf = float("inf")
    return (run.node in row.nodes and (row.start or inf) <= (run.end if run.end is not None else inf)
            and (row.end if row.end is not None else inf) >= run.start)


def _self_requeued(history: JobHistory, account: SlurmAccount, requeues: int) -> list[Run]:
    """The job's runs on a node preempted under it that burstd did not requeue (the job requeued itself on the
    notice): those Slurm recorded as cut short on that node; without Slurm's runs, as many as the requeues burstd
    did not make, oldest first."""
    candidates = [r for r in history.runs if r.lease_lost == "preempted" and not r.ended_by]
    if account.runs:
        return [r for r in candidates if any(s.state in CUT_SHORT and _overlaps(r, s) for s in account.runs)]
    return candidates[: max(0, requeues - history.requeued_by_burstd)]


def slurm_account(job_id: int, rows: Iterable[SacctJob] | None, cloud_nodes: Collection[str],
                  note: str = "") -> SlurmAccount:
    """What ``rows`` (sacct's, of any jobs; None: no accounting, ``note`` says why) record of ``job_id``."""
    mine = sorted((r for r in rows or () if r.job_id == job_id), key=run_order)
    cloud = frozenset(cloud_nodes)
    return SlurmAccount(mine[0].slurm_id if mine else str(job_id),
                        tuple(SlurmRun(r.state, r.start, r.end, r.nodes, bool(cloud & set(r.nodes))) for r in mine),
                        note if rows is None else "" if mine else "sacct lists no run of it in this period")


def join_accounting(histories: Iterable[JobHistory], rows: Iterable[SacctJob] | None, cloud_nodes: Collection[str],
                    *, note: str = "", restarts: Mapping[int, int] | None = None) -> list[JobHistory]:
    """Each story with Slurm's record of its job joined on (new objects; the order kept).

    ``rows``: sacct's runs of these jobs (``sacct -D``), or None where there is no accounting to read, ``note``
    saying why; ``cloud_nodes``: every node of burstd's pools; ``restarts``: requeues known otherwise (Slurm's
    ``restart_count`` of a job it still lists, the requeue watch's count): the requeue count is the largest of
    burstd's own, sacct's and these, each a count of requeues that happened."""
    by_job: dict[int, list[SacctJob]] = {}
    for row in rows or ():
        by_job.setdefault(row.job_id, []).append(row)
    out = []
    for h in histories:
        account = slurm_account(h.job_id, None if rows is None else by_job.get(h.job_id, []), cloud_nodes, note)
        requeues = max(h.requeues, account.requeues, (restarts or {}).get(h.job_id, 0))
        preempted = {id(r) for r in _self_requeued(h, account, requeues)}
        runs = [dataclasses.replace(r, ended_by="preempted") if id(r) in preempted else r for r in h.runs]
        out.append(dataclasses.replace(h, runs=runs, requeues=requeues, accounting=account,
                                       preemptions=h.preemptions + len(preempted)))
    return out
