"""A job id as a user types it, written the way Slurm writes it: ``1234``, an array task ``1234_5``, a pending
array's tasks ``1234_[1-3]``, a het component ``1234+0`` (a step suffix from sacct, ``1234.batch``, is dropped).

``int("1234_5")`` is 12345 in Python (underscores group digits), so no command may read a typed job id with
``int()``: ``parse_job_ref`` is the one parser, used by the CLI and by the control API alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from burstd.domain.slurm import Job

MAX_JOB_ID = 2**32 - 1  # Slurm job ids (and array task ids) are 32-bit

_REF = re.compile(r"(?P<job>\d+)(?:_(?P<task>\d+)|_\[(?P<tasks>[0-9,\-:%]+)\]|\+(?P<het>\d+))?"
                  r"(?:\.(?:batch|extern|interactive|\d+))?")
_TASK_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


class JobRefError(ValueError):
    """A job id that is not one Slurm writes; the message quotes it and shows the forms that are."""


@dataclass(frozen=True, slots=True)
class JobRef:
    job_id: int  # the number before any _ or +: a job, an array's job id, or a het job's leader
    task: int | None = None  # 1234_5
    tasks: str = ""  # 1234_[1-3]: Slurm's task expression, as in squeue
    het_offset: int | None = None  # 1234+0

    def __str__(self) -> str:
        if self.task is not None:
            return f"{self.job_id}_{self.task}"
        if self.tasks:
            return f"{self.job_id}_[{self.tasks}]"
        if self.het_offset is not None:
            return f"{self.job_id}+{self.het_offset}"
        return str(self.job_id)

    @property
    def plain(self) -> bool:
        return self.task is None and not self.tasks and self.het_offset is None

    def matches(self, job: Job) -> bool:
        """Is ``job`` (one record of a Slurm snapshot) the job, task or component this names?"""
        if self.het_offset is not None:
            return job.het_job_id == self.job_id and job.het_job_offset == self.het_offset
        if self.task is not None:
            if job.array_job_id == self.job_id and job.array_task_id == self.task:
                return True
            # a task not started yet is still part of its array's pending record (1234_[5-9])
            return _is_array_record(job, self.job_id) and self.task in task_ids(job.array_tasks)
        if self.tasks:
            if _is_array_record(job, self.job_id):
                return True
            return job.array_job_id == self.job_id and job.array_task_id in task_ids(self.tasks)
        return job.job_id == self.job_id

    def find(self, jobs: Iterable[Job]) -> list[Job]:
        """The snapshot's records this names: for a plain id the job itself, else (an array's or a het job's
        id typed alone) every task or component of it; the pending array record first."""
        jobs = list(jobs)
        hits = [j for j in jobs if self.matches(j)]
        if self.plain:
            hits += [j for j in jobs if j not in hits and self.job_id in (j.array_job_id, j.het_job_id)]
        return sorted(hits, key=lambda j: (not j.array_tasks, j.job_id))


def _is_array_record(job: Job, array_job_id: int) -> bool:
    return bool(job.array_tasks) and (job.array_job_id or job.job_id) == array_job_id


def task_ids(expr: str) -> frozenset[int]:
    """The task ids of a Slurm array expression: ``1-9``, ``1,3,5-7``, ``0-15:4``, ``1-3%1`` (``%``: a limit
    on how many run at once, not a task)."""
    out: set[int] = set()
    for part in expr.split("%", 1)[0].split(","):
        m = _TASK_RANGE.fullmatch(part)
        if m is None:
            raise JobRefError(f"array tasks {expr!r}: {part!r} is not N, N-M or N-M:STEP")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1 or hi - lo > 4_000_000:  # Slurm's MaxArraySize is at most 4000001
            raise JobRefError(f"array tasks {expr!r}: {part!r} is not a range Slurm accepts")
        out.update(range(lo, hi + 1, step))
    return frozenset(out)


def parse_job_ref(text: str) -> JobRef:
    """``text`` as Slurm writes job ids; ``JobRefError`` (naming it) for anything else."""
    s = text.strip()
    m = _REF.fullmatch(s)
    if m is None:
        raise JobRefError(f"job id {text!r}: expected a Slurm job id such as 1234, an array task 1234_5, "
                          "an array's tasks 1234_[1-3] or a het job component 1234+0")
    ref = JobRef(int(m["job"]), task=None if m["task"] is None else int(m["task"]), tasks=m["tasks"] or "",
                 het_offset=None if m["het"] is None else int(m["het"]))
    if not 1 <= ref.job_id <= MAX_JOB_ID or (ref.task or 0) > MAX_JOB_ID or (ref.het_offset or 0) > MAX_JOB_ID:
        raise JobRefError(f"job id {text!r}: out of Slurm's range (1 to {MAX_JOB_ID})")
    if ref.tasks:
        task_ids(ref.tasks)  # checked now: a bad range is the user's typing, reported as such
    return ref
