"""A requeue the daemon owes, kept in the store's intent queue until Slurm has it (pure encoding).

A lost node's jobs are requeued in three steps: the record below is queued, the lease moves to FAILED, the
``scontrol requeue`` calls are made, and the record is forgotten. A daemon killed anywhere in between finds the
record at its next cycle (``planning.plan_intents`` -> ``Requeue``) and requeues what is still owed, judged
afresh by ``planning.jobs_to_requeue``: a job Slurm already has back (pending, or running on another node) is
left alone, so a requeue is neither lost nor doubled.

    >>> text = encode(OwedRequeue("L1", (4, 9), 1000.0, True))
    >>> decode(text)
    OwedRequeue(lease_id='L1', job_ids=(4, 9), since=1000.0, expedite=True)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

#: The intent kind; its node column names the lost node, its reason is ``encode``'s text.
REQUEUE = "requeue"


@dataclass(frozen=True, slots=True)
class OwedRequeue:
    lease_id: str
    job_ids: tuple[int, ...]
    since: float  # when the node was lost (the jobs on it then come back)
    expedite: bool  # a running node taken away: the jobs may start again at once


def encode(owed: OwedRequeue) -> str:
    return json.dumps({"lease": owed.lease_id, "jobs": list(owed.job_ids), "since": owed.since,
                       "expedite": owed.expedite}, separators=(",", ":"))


def decode(text: str) -> OwedRequeue:
    """The record back; ValueError naming what is wrong when the text is not one ``encode`` wrote."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"requeue record is not JSON: {exc}") from None
    if not isinstance(doc, dict):  # bad input, one ValueError for every way it is bad (callers catch that)
        raise ValueError("requeue record is not a JSON object")  # noqa: TRY004
    lease, jobs, since, expedite = doc.get("lease"), doc.get("jobs"), doc.get("since"), doc.get("expedite")
    if not isinstance(lease, str) or not lease:
        raise ValueError("requeue record: 'lease' must be a non-empty string")
    if not isinstance(jobs, list) or not all(isinstance(j, int) and not isinstance(j, bool) and j > 0 for j in jobs):
        raise ValueError("requeue record: 'jobs' must be a list of positive job ids")
    if isinstance(since, bool) or not isinstance(since, int | float) or not math.isfinite(since):
        raise ValueError("requeue record: 'since' must be a finite number of Unix seconds")
    if not isinstance(expedite, bool):
        raise ValueError("requeue record: 'expedite' must be true or false")  # noqa: TRY004
    return OwedRequeue(lease, tuple(jobs), float(since), expedite)
