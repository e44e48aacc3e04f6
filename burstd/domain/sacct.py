"""What slurmdbd recorded, as values: a job's runs (``sacct``) and cloud instances (``sacctmgr show instance``).
The Slurm adapters read them (burstd/slurm/accounting.py, sacct.py); the spend report compares them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SacctJob:
    """One run of an allocation as slurmdbd recorded it (``sacct -X -D``: a requeued job has one per run)."""

    job_id: int
    account: str
    user: str
    nodes: tuple[str, ...]  # expanded NodeList
    state: str
    start: float | None
    end: float | None
    instance_ids: tuple[str, ...] = ()
    # an array task's array (1234 of 1234_5) and task; None where not a task or not known (sacct -P has no field
    # for it: there ``sacct --jobs=1234_5`` itself picks the task)
    array_job_id: int | None = None
    array_task_id: int | None = None

    @property
    def slurm_id(self) -> str:
        """The id as Slurm writes it for people: ``1234_5`` for an array task, else the job's own id."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)


@dataclass(frozen=True)
class SlurmInstance:
    """One cloud instance as slurmdbd recorded it (``sacctmgr show instance``, Slurm 23.11+)."""

    node: str
    instance_id: str
    instance_type: str
    start: float | None
    end: float | None
