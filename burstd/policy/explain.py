"""What ``burstctl explain JOBID`` prints: one sentence with the figures that decided the job's fate.

The daemon keeps the last cycle's ``Decisions`` and snapshot; its API answers with

    explain_job(job_id, snapshot, decisions=last_decisions)                  # cheap: no new decision
    explain_job(job_id, snapshot, leases=..., budgets=..., prices=..., config=...)  # fresh decide() run

Both return an ``ExplainResult`` (``.as_dict()`` for JSON, ``.sentence`` for the terminal), e.g.

    job 4242 (chem/alice): waited 14 min, expected on-prem start in 3 h, account chem has $412.00 left
    this month, pool aws-a100-spot at $11.80/node-h: burst
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from burstd.config import Config
from burstd.domain.budget import BudgetBook
from burstd.domain.decisions import Decisions, Explanation
from burstd.domain.jobref import JobRef
from burstd.domain.lease import Lease
from burstd.domain.slurm import Job, Snapshot
from burstd.policy.decide import decide
from burstd.policy.offers import PriceInput


@dataclass(frozen=True, slots=True)
class ExplainResult:
    job_id: int
    found: bool  # the job is in the snapshot
    state: str  # Slurm state, "" when not found
    burst: bool
    pool: str | None
    reason: str
    sentence: str

    def as_dict(self) -> dict:
        return {"job_id": self.job_id, "found": self.found, "state": self.state, "burst": self.burst,
                "pool": self.pool, "reason": self.reason, "sentence": self.sentence}


def _find(snapshot: Snapshot, ref: JobRef) -> Job | None:
    hits = ref.find(snapshot.jobs)
    return hits[0] if hits else None


def _who(job: Job) -> str:
    return f"job {job.display_id} ({job.account}/{job.user})"


def explain_running(job: Job, snapshot: Snapshot, leases: Sequence[Lease] = (),
                    config: Config | None = None) -> str:
    """A sentence for a job that is not pending: where it runs and, on a cloud node, on which lease."""
    cloud_parts = {p.partition: p.name for p in config.pools} if config else {}
    part = job.partitions[0] if job.partitions else ""
    if job.is_running:
        lease = next((le for le in leases if job.job_id in le.job_ids and le.is_live), None)
        if part in cloud_parts or lease is not None:
            pool = cloud_parts.get(part) or (lease.pool if lease else "?")
            extra = f", lease {lease.lease_id} ({lease.market}, {lease.state})" if lease else ""
            return f"{_who(job)}: running in cloud pool {pool} on {job.nodes or '?'}{extra}"
        return f"{_who(job)}: running on-prem on {job.nodes or '?'}"
    return f"{_who(job)}: {job.state.lower()}, nothing to decide"


def explain_job(
    job: int | JobRef,
    snapshot: Snapshot,
    *,
    decisions: Decisions | None = None,
    leases: Sequence[Lease] = (),
    budgets: BudgetBook | None = None,
    prices: PriceInput = None,
    config: Config | None = None,
    now: float | None = None,
) -> ExplainResult:
    """Why ``job`` (an id, or an array task / het component as Slurm writes it) bursts or not. Uses
    ``decisions`` when given, else runs ``decide()`` (pure) afresh."""
    ref = job if isinstance(job, JobRef) else JobRef(job)
    found = _find(snapshot, ref)
    if found is None:
        s = f"job {ref}: not in the queue (finished, cancelled, or never submitted)"
        return ExplainResult(ref.job_id, False, "", False, None, "not in the queue", s)
    job_id = found.job_id
    if not found.is_pending:
        s = explain_running(found, snapshot, leases, config)
        return ExplainResult(job_id, True, found.state, False, None, s.split(": ", 1)[1], s)
    if decisions is None:
        if budgets is None or config is None:
            raise ValueError("explain_job needs either decisions or budgets + config to decide afresh")
        decisions = decide(snapshot, leases, budgets, prices, config, now)
    ex: Explanation | None = decisions.explanations.get(job_id)
    if ex is None:
        reason = "not considered in the last cycle (it arrived after it; ask again after the next cycle)"
        return ExplainResult(job_id, True, found.state, False, None, reason, f"{_who(found)}: {reason}")
    return ExplainResult(job_id, True, found.state, ex.burst, ex.pool, ex.reason, f"{_who(found)}: {ex.reason}")
