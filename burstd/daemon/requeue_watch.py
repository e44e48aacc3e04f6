"""Requeues burstd did not make: a job that ran on a cloud node and went back to the queue by itself.

The training templates (``sbatch_templates/``) checkpoint on a preemption notice and run ``scontrol requeue``
themselves, so by the time the node is gone the job is already pending and burstd requeues nothing: counted
only where burstd requeued, ``burstd_jobs_requeued_total`` stayed 0 through every preemption. Slurm's
``restart_count`` says how often a job was requeued, whoever did it; this watch counts its rises for jobs it saw
on a cloud node, less the requeues burstd made itself (already counted where it made them).

    watch = RequeueWatch()
    n = watch.observe(snapshot.jobs, on_cloud=lambda job: ..., ours={burstd's requeues since the last call})

Pure: jobs in, a count out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from burstd.domain.slurm import Job


class RequeueWatch:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # job -> restart_count when last seen, for jobs seen on a cloud node

    def observe(self, jobs: Iterable[Job], on_cloud: Callable[[Job], bool], ours: Collection[int] = ()) -> int:
        """Requeues of watched jobs since the last call that burstd did not make (``ours``: the jobs burstd
        requeued since then, once each). A job Slurm no longer lists is forgotten."""
        count, seen = 0, {}
        for job in jobs:
            before = self.seen.get(job.job_id)
            if before is not None and job.restart_count > before:
                count += max(0, job.restart_count - before - (job.job_id in ours))
            if before is not None or (job.is_running and on_cloud(job)):
                seen[job.job_id] = job.restart_count
        self.seen = seen
        return count
