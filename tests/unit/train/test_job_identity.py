"""A recycled job id never continues an older job's checkpoint; the job's own requeues always do."""

from __future__ import annotations

import pytest

from burstd.train.identity import RUN_STARTED_ENV, foreign_checkpoint, job_identity


def _env(job="4242", restart=None, started="1700000000", cluster=None):
    env = {"SLURM_JOB_ID": job, RUN_STARTED_ENV: started}
    if restart is not None:
        env["SLURM_RESTART_COUNT"] = str(restart)
    if cluster:
        env["SLURM_CLUSTER_NAME"] = cluster
    return env


def _manifest(**kw):
    return {"job": job_identity(_env(**kw))}


@pytest.mark.parametrize("written_by, resumed_by, foreign", [
    (dict(restart=0), dict(restart=1, started="1700000900"), False),   # the requeued run continues
    (dict(restart=2), dict(restart=5, started="1700009000"), False),   # any later run does
    (dict(restart=1), dict(restart=1), False),                          # the same run (workers restarted)
    (dict(), dict(started="1800000000"), True),                         # a new job with the recycled id
    (dict(restart=3), dict(restart=1, started="1800000000"), True),     # ... even after its own requeue
    (dict(restart=1), dict(restart=1, started="1800000000"), True),     # same count, another run
    (dict(job="77"), dict(), False),                                    # another id: a folder handed over
    (dict(cluster="a"), dict(restart=1, cluster="b"), True),            # the same id on another cluster
])
def test_which_runs_may_continue_a_checkpoint(written_by, resumed_by, foreign):
    why = foreign_checkpoint(_manifest(**written_by), _env(**resumed_by))
    assert (why is not None) == foreign, why


def test_the_reason_says_what_happened():
    why = foreign_checkpoint(_manifest(started="1700000000"), _env(started="1800000000"))
    assert why is not None and "reuses an old job's id" in why and "1700000000" in why and "1800000000" in why


def test_outside_slurm_or_before_identities_nothing_is_refused():
    assert foreign_checkpoint(_manifest(), {}) is None
    assert foreign_checkpoint({"slurm_job_id": "4242"}, _env()) is None


def test_slurm_start_time_is_the_fallback_run_marker():
    ident = job_identity({"SLURM_JOB_ID": "1", "SLURM_JOB_START_TIME": "1700000123"})
    assert ident == {"slurm_job_id": "1", "slurm_cluster": None, "restart": 0, "run_started": "1700000123"}


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


@pytest.mark.torch
def test_resume_refuses_a_recycled_ids_checkpoint_and_accepts_its_own_requeue(tmp_path, monkeypatch):
    from burstd.train import CheckpointManager, ForeignCheckpointError

    for key, value in _env(started="1700000000").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    CheckpointManager(tmp_path, _model()).save(9, reason="preempt")

    monkeypatch.setenv(RUN_STARTED_ENV, "1800000000")  # a new job 4242, first run
    with pytest.raises(ForeignCheckpointError, match=r"step-000000009 belongs to another job.*new checkpoint folder"):
        CheckpointManager(tmp_path, _model()).resume()

    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the original job's requeued run
    assert CheckpointManager(tmp_path, _model()).resume() == 9
