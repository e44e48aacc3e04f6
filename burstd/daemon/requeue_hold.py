"""A job that requeued itself after a spot notice starts again at once, not after Slurm's requeue hold (pure).

A job told of a notice checkpoints and runs ``scontrol requeue`` on itself (the sbatch templates do). Slurm then
holds it for ``cred_expire`` + 1 s (31 s by default) before it may start again; burstd's own requeues skip that
hold (``SlurmAdapter.requeue(expedite=True)``), and this module finds the jobs that requeued themselves so that
the cycle can do the same for them (``StartNow``: ``scontrol update jobid=N starttime=now``).
"""

from __future__ import annotations

from collections.abc import Iterable

from burstd.daemon.actions import StartNow
from burstd.domain.slurm import Snapshot

#: The longest requeue hold burstd takes away: Slurm's is cred_expire + 1 s (31 s by default; cred_expire may be
#: raised to a few minutes). A later begin time is someone's decision (``--begin``, ``scontrol update``): kept.
MAX_HOLD_S = 300.0


def plan_start_now(snapshot: Snapshot | None, cloud_partitions: Iterable[str], now: float) -> list[StartNow]:
    """Pending jobs that were burst before (a cloud partition, restarted at least once) and wait only for the
    begin time their requeue set, at most ``MAX_HOLD_S`` away: each one may start now."""
    if snapshot is None:
        return []
    clouds = set(cloud_partitions)
    out = []
    for job in snapshot.pending:
        if (job.restart_count > 0 and job.reason == "BeginTime" and clouds & set(job.partitions)
                and not job.hold and job.eligible_time is not None and now < job.eligible_time <= now + MAX_HOLD_S):
            out.append(StartNow(job.job_id))
    return out
