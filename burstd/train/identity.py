"""Whose checkpoint is this? A job's identity in its manifests, and the resume check (no torch, no I/O).

The templates' default checkpoint folder is keyed by ``SLURM_JOB_ID``, which stays the same across requeues,
but Slurm hands out ids again (a new cluster, a reset ``FirstJobId``, a restored controller): a later job with
the same id must not continue an older job's training. What tells them apart without anything stored outside
the folder: every requeue raises ``SLURM_RESTART_COUNT``, so a run may continue only a checkpoint written by an
*earlier* run of its job, or by its own run (torchrun restarting its workers), recognised by the run's start
time (``BURSTD_RUN_STARTED``, which the templates export, else Slurm's ``SLURM_JOB_START_TIME``). A new job
reusing the id starts at restart 0 and meets checkpoints from restart 0 or later of a run that started at
another time: refused.

A checkpoint from a job with another id is accepted: pointing ``CKPT_DIR`` at an earlier job's folder is how a
researcher continues it on purpose (docs/researchers.md), and a recycled id is always the same id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from burstd.train.store import CheckpointError

RUN_STARTED_ENV = "BURSTD_RUN_STARTED"


class ForeignCheckpointError(CheckpointError):
    """The newest complete checkpoint was written by another job that had this job's id."""


def job_identity(env: Mapping[str, str]) -> dict[str, Any]:
    """What a manifest records of the job writing it."""
    restart = env.get("SLURM_RESTART_COUNT", "0") or "0"
    return {
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "slurm_cluster": env.get("SLURM_CLUSTER_NAME"),
        "restart": int(restart) if restart.isdigit() else 0,
        "run_started": env.get(RUN_STARTED_ENV) or env.get("SLURM_JOB_START_TIME"),
    }


def foreign_checkpoint(manifest: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """Why the checkpoint with ``manifest`` belongs to another job than the one in ``env``, or None if this job
    may continue it."""
    mine = job_identity(env)
    theirs = manifest.get("job")
    if mine["slurm_job_id"] is None or not isinstance(theirs, Mapping):
        return None  # not in Slurm, or a checkpoint from before identities: nothing to compare
    if str(theirs.get("slurm_job_id")) != mine["slurm_job_id"]:
        return None  # another id: a folder handed over on purpose
    if theirs.get("slurm_cluster") and mine["slurm_cluster"] and theirs["slurm_cluster"] != mine["slurm_cluster"]:
        return f"it was written on cluster {theirs['slurm_cluster']}, this job runs on {mine['slurm_cluster']}"
    their_restart = theirs.get("restart")
    if not isinstance(their_restart, int):
        return f"its job identity is malformed ({dict(theirs)!r})"
    if their_restart < mine["restart"]:
        return None  # an earlier run of this job
    if their_restart == mine["restart"] and theirs.get("run_started") == mine["run_started"]:
        return None  # this very run (its workers restarted)
    return (f"it was written by run {their_restart + 1} of a job {mine['slurm_job_id']} that started at "
            f"{theirs.get('run_started') or '?'}, but this is run {mine['restart'] + 1} of job "
            f"{mine['slurm_job_id']}, started at {mine['run_started'] or '?'}: a new job that reuses an old job's id")


def refuse_foreign(location: str, manifest: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Raise :class:`ForeignCheckpointError` with what to do, if the checkpoint is another job's."""
    why = foreign_checkpoint(manifest, env)
    if why is not None:
        raise ForeignCheckpointError(
            f"checkpoint {location} belongs to another job: {why}. Resume refused. Give this job a new "
            f"checkpoint folder (CKPT_DIR), or move the old one away if its training is no longer wanted.")
