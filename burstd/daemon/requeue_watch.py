"""Requeues burstd did not make: a job that ran on a cloud node and went back to the queue by itself.

The training templates (``sbatch_templates/``) checkpoint on a preemption notice and run ``scontrol requeue``
themselves, so by the time the node is gone the job is already pending and burstd requeues nothing: counted
only where burstd requeued, ``burstd_jobs_requeued_total`` stayed 0 through every preemption. Slurm's
``restart_count`` says how often a job was requeued, whoever did it; this watch counts its rises for jobs it saw
on a cloud node, less the requeues burstd made itself (already counted where it made them).

    watch = RequeueWatch()
    n = watch.observe(snapshot.jobs, on_cloud=lambda job: ..., ours={burstd's requeues since the last call})
    watch.requeued[job_id]  # per job, what ``burstctl jobs`` adds to burstd's own requeues of it

Pure: jobs in, a count out. The per-job counts live as long as the daemon (Slurm's own ``restart_count`` and
sacct's records of every run are the durable sources: ``burstd.report.job_accounting``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from burstd.domain.slurm import Job

#: the jobs whose count is kept (the newest): the watch must not grow without bound in a daemon that runs for months
MAX_JOBS_KEPT = 50_000


class RequeueWatch:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # job -> restart_count when last seen, for jobs seen on a cloud node
        self.requeued: dict[int, int] = {}  # job -> requeues counted here (not burstd's), oldest job first

    def observe(self, jobs: Iterable[Job], on_cloud: Callable[[Job], bool], ours: Collection[int] = ()) -> int:
        """Requeues of watched jobs since the last call that burstd did not make (``ours``: the jobs burstd
        requeued since then, once each). A job Slurm no longer lists is forgotten."""
        count, seen = 0, {}
        for job in jobs:
            before = self.seen.get(job.job_id)
            if before is not None and job.restart_count > before:
                n = max(0, job.restart_count - before - (job.job_id in ours))
                if n:
                    count += n
                    self.requeued[job.job_id] = self.requeued.pop(job.job_id, 0) + n  # now the newest
            if before is not None or (job.is_running and on_cloud(job)):
                seen[job.job_id] = job.restart_count
        self.seen = seen
        while len(self.requeued) > MAX_JOBS_KEPT:
            del self.requeued[next(iter(self.requeued))]
        return count
