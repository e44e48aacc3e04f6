"""The work each requeued pending job kept from its earlier cloud runs, for ``decide(..., progress=...)``.

The replay passes the same figure (``burstd.policy.progress.kept_work_s``), so Uniform Progress escalates a
preempted job live exactly as it does in ``burstctl simulate``. Pure: the caller reads the leases.
"""

from __future__ import annotations

from collections.abc import Iterable

from burstd.domain.lease import Lease
from burstd.domain.slurm import Snapshot
from burstd.policy.progress import kept_work_s


def requeued_since(snapshot: Snapshot) -> float | None:
    """The earliest submit time of a pending job that ran before (``restart_count > 0``): no lease that
    ran one of them ended before it. None: no such job, nothing to read."""
    times = [j.submit_time or 0 for j in snapshot.jobs if j.state == "PENDING" and j.restart_count > 0]
    return min(times) if times else None


def kept_work(snapshot: Snapshot, ended: Iterable[Lease], checkpoint_interval_s: float) -> dict[int, float]:
    """Seconds of work each requeued pending job kept, by job id (jobs with none are left out).

    A run is one lease, or one gang of leases launched together (a multi-node job), from the moment its
    last node was ready to the moment its first node ended: the job ran only while all of them were up."""
    wanted = {j.job_id for j in snapshot.jobs if j.state == "PENDING" and j.restart_count > 0}
    runs: dict[tuple[int, str], tuple[float, float]] = {}
    for lease in ended:
        if lease.ready_at is None or lease.ended_at is None:
            continue  # never ran the job
        for jid in lease.job_ids:
            if jid not in wanted:
                continue
            key = (jid, lease.gang or lease.lease_id)
            ready, end = runs.get(key, (lease.ready_at, lease.ended_at))
            runs[key] = (max(ready, lease.ready_at), min(end, lease.ended_at))
    by_job: dict[int, list[float]] = {}
    for (jid, _), (ready, end) in runs.items():
        by_job.setdefault(jid, []).append(end - ready)
    out = {jid: kept_work_s(lengths, checkpoint_interval_s) for jid, lengths in by_job.items()}
    return {jid: s for jid, s in out.items() if s > 0}

