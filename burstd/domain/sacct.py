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


@dataclass(frozen=True)
class SlurmInstance:
    """One cloud instance as slurmdbd recorded it (``sacctmgr show instance``, Slurm 23.11+)."""

    node: str
    instance_id: str
    instance_type: str
    start: float | None
    end: float | None
