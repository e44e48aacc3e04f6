"""`python -m burstd.train should-requeue`: only a preemption checkpoint from this run of this job requeues."""

from __future__ import annotations

import json

import pytest

from burstd.train.__main__ import main, should_requeue
from burstd.train.store import MANIFEST


def _ckpt(root, step, reason, job="7", restart="0"):
    d = root / f"step-{step:09d}"
    d.mkdir(parents=True)
    (d / MANIFEST).write_text(json.dumps({"step": step, "reason": reason, "slurm_job_id": job,
                                          "slurm_restart_count": restart}))


@pytest.mark.parametrize(
    "reason,job,restart,env,expected",
    [
        ("preempt", "7", "0", {"SLURM_JOB_ID": "7"}, True),
        ("preempt", "7", "1", {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"}, True),
        ("preempt", "7", "0", {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"}, False),  # an earlier run's
        ("preempt", "6", "0", {"SLURM_JOB_ID": "7"}, False),  # another job's folder
        ("periodic", "7", "0", {"SLURM_JOB_ID": "7"}, False),  # crashed after a periodic save: a real failure
        ("preempt", "7", "0", {}, True),  # outside Slurm
    ],
)
def test_should_requeue(tmp_path, reason, job, restart, env, expected):
    _ckpt(tmp_path, 3, reason, job, restart)
    assert should_requeue(str(tmp_path), env)[0] is expected


def test_a_survivors_checkpoint_does_not_requeue_the_job_but_says_what_happened(tmp_path):
    _ckpt(tmp_path, 12, "jit")
    ok, why = should_requeue(str(tmp_path), {"SLURM_JOB_ID": "7"})
    assert not ok and why == (f"a rank of this job was lost after step 12: the surviving ranks saved "
                              f"{tmp_path}/step-000000012 just in time (burstd requeues a job whose node was lost)")


def test_should_requeue_without_checkpoint_is_false(tmp_path):
    ok, why = should_requeue(str(tmp_path / "none"), {})
    assert not ok and "no complete checkpoint" in why


def test_cli_latest_and_exit_codes(tmp_path, capsys, monkeypatch):
    assert main(["latest", str(tmp_path)]) == 1
    _ckpt(tmp_path, 2, "periodic")
    _ckpt(tmp_path, 5, "preempt")
    (tmp_path / "step-000000009.partial").mkdir()
    assert main(["latest", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["latest"]["step"] == 5 and out["complete"] == [2, 5] and out["torn"][0].endswith(".partial")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert main(["should-requeue", str(tmp_path)]) == 0


def test_should_requeue_prints_the_one_line_a_researcher_reads(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    _ckpt(tmp_path, 412, "preempt")
    manifest = tmp_path / "step-000000412" / MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "node": "cloud2"}))
    assert main(["should-requeue", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "preempted on cloud2 at step 412, checkpoint saved\n"
    assert main(["should-requeue", str(tmp_path), "--node", "cloud[2-3]"]) == 0
    assert capsys.readouterr().out == "preempted on cloud[2-3] at step 412, checkpoint saved\n"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # a later run: this checkpoint is not its preemption
    assert main(["should-requeue", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "restart 0, this is restart 1" in captured.err
