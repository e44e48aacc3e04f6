"""CheckpointManager and Preemptible in one process (no torchrun): round trips, RNG, async, errors."""

from __future__ import annotations

import json
import os
import random
import signal

import numpy as np
import pytest

pytestmark = [pytest.mark.torch]


@pytest.fixture(autouse=True, scope="module")
def _torch_imported():
    """torch loads when these tests run, not at collection (tests/conftest.py, the torch marker)."""
    global torch, CheckpointDirError, CheckpointManager, CheckpointMismatchError, Preemptible
    import torch

    from burstd.train import CheckpointDirError, CheckpointManager, CheckpointMismatchError, Preemptible


class Position:
    def __init__(self):
        self.position = 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def _setup(width=8, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(), torch.nn.Linear(width, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched, Position()


def _train(model, opt, sched, pos, steps):
    for _ in range(steps):
        x = torch.randn(3, 4)
        loss = (model(torch.nn.functional.dropout(x, 0.2)) ** 2).mean() * (1 + random.random() + np.random.rand())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        pos.position += 1


def _snapshot(model, opt):
    return [p.detach().clone() for p in model.parameters()] + [
        v.clone() for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]


@pytest.mark.parametrize("async_save", [False, True])
def test_resume_continues_exactly_where_the_saved_run_would_have(tmp_path, async_save):
    model, opt, sched, pos = _setup()
    mgr = CheckpointManager(tmp_path, model, opt, stateful={"sched": sched, "data": pos}, async_save=async_save)
    _train(model, opt, sched, pos, 3)
    mgr.save(3)
    mgr.wait()
    _train(model, opt, sched, pos, 4)  # the "uninterrupted" continuation, RNG included
    expected = _snapshot(model, opt)

    model2, opt2, sched2, pos2 = _setup(seed=123)  # fresh process: different init and RNG
    random.seed(99)
    np.random.seed(99)
    mgr2 = CheckpointManager(tmp_path, model2, opt2, stateful={"sched": sched2, "data": pos2})
    assert mgr2.resume() == 3
    assert pos2.position == 3 and sched2.state_dict() == {**sched2.state_dict(), "last_epoch": 3}
    _train(model2, opt2, sched2, pos2, 4)
    got = _snapshot(model2, opt2)
    assert len(got) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


def test_a_blocking_save_skips_the_zip_crc_dcp_never_reads_and_restores_the_setting(tmp_path, monkeypatch):
    if not hasattr(torch.serialization, "set_crc32_options"):
        pytest.skip("torch < 2.5 has no switch")
    import torch.distributed.checkpoint as dcp

    seen = []
    real_save = dcp.save
    monkeypatch.setattr(dcp, "save", lambda *a, **k: (seen.append(torch.serialization.get_crc32_options()),
                                                      real_save(*a, **k))[1])
    model, opt, _sched, _pos = _setup()
    mgr = CheckpointManager(tmp_path, model, opt)
    mgr.save(1)
    assert seen == [False]  # inside the save
    assert torch.serialization.get_crc32_options() is True  # the user's torch.save is untouched after it
    expected = _snapshot(model, opt)
    model2, opt2, _s2, _p2 = _setup(seed=7)
    assert CheckpointManager(tmp_path, model2, opt2).resume() == 1
    assert all(torch.equal(a, b) for a, b in zip(expected, _snapshot(model2, opt2), strict=True))


def test_manifest_is_written_last_and_describes_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    model, opt, sched, _pos = _setup()
    mgr = CheckpointManager(tmp_path, model, opt, stateful={"sched": sched})
    mgr.save(5, reason="preempt")
    d = tmp_path / "step-000000005"
    manifest = json.loads((d / "burstd-checkpoint.json").read_text())
    assert manifest["step"] == 5 and manifest["reason"] == "preempt" and manifest["world_size"] == 1
    assert manifest["slurm_job_id"] == "4242" and manifest["slurm_restart_count"] == "2"
    assert manifest["tensors"]["app.model.0.weight"] == [8, 4]
    assert (d / ".metadata").exists() and (d / "extra-rank00000.pt").exists()
    assert not (tmp_path / "step-000000005.partial").exists()


def test_periodic_saves_keep_only_the_newest(tmp_path):
    model, opt, _sched, _pos = _setup()
    mgr = CheckpointManager(tmp_path, model, opt, keep=2)
    for step in (2, 4, 6, 8):
        mgr.save(step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000006", "step-000000008"]


def test_torn_checkpoints_are_skipped_and_removed_on_resume(tmp_path, caplog):
    model, opt, _sched, _pos = _setup()
    CheckpointManager(tmp_path, model, opt).save(4)
    (tmp_path / "step-000000008.partial").mkdir()
    (tmp_path / "step-000000009").mkdir()
    model2, opt2, *_ = _setup(seed=5)
    with caplog.at_level("WARNING", logger="burstd.train"):
        assert CheckpointManager(tmp_path, model2, opt2).resume() == 4
    assert "step-000000008.partial" in caplog.text and "step-000000009" in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004"]


def test_different_model_shape_is_a_clear_error_not_a_restart(tmp_path):
    model, opt, *_ = _setup(width=8)
    CheckpointManager(tmp_path, model, opt).save(7)
    model2, opt2, *_ = _setup(width=16)
    with pytest.raises(CheckpointMismatchError) as err:
        CheckpointManager(tmp_path, model2, opt2).resume()
    msg = str(err.value)
    assert "step-000000007" in msg and "app.model.0.weight has shape (8, 4) in the checkpoint but (16, 4) here" in msg


def test_missing_stateful_entry_is_a_clear_error(tmp_path):
    model, opt, *_ = _setup()
    CheckpointManager(tmp_path, model, opt).save(1)
    with pytest.raises(CheckpointMismatchError, match="no state for 'data'"):
        CheckpointManager(tmp_path, model, opt, stateful={"data": Position()}).resume()


def test_unwritable_location_fails_at_construction(tmp_path):
    (tmp_path / "f").write_text("")
    model, opt, *_ = _setup()
    with pytest.raises(CheckpointDirError, match="not writable"):
        CheckpointManager(tmp_path / "f" / "ckpt", model, opt)


def test_fsspec_location_round_trip():
    url = "memory://burstd-unit-ckpt/run"
    model, opt, _sched, pos = _setup()
    mgr = CheckpointManager(url, model, opt, stateful={"data": pos})
    pos.position = 11
    mgr.save(11)
    model2, opt2, _s, pos2 = _setup(seed=9)
    assert CheckpointManager(url, model2, opt2, stateful={"data": pos2}).resume() == 11
    assert pos2.position == 11
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    mgr.store.remove_tree(mgr.store.root)


def test_preemptible_saves_and_exits_with_requeue_code_on_signal(tmp_path):
    model, opt, sched, pos = _setup()
    job = Preemptible(tmp_path, model, opt, stateful={"data": pos}, every=0)
    try:
        assert job.resume() == 0
        _train(model, opt, sched, pos, 1)
        job.step_done(1)
        assert list(tmp_path.iterdir()) == []
        os.kill(os.getpid(), signal.SIGUSR1)
        _train(model, opt, sched, pos, 1)
        with pytest.raises(SystemExit) as ex:
            job.step_done(2)
        assert ex.value.code == 85
        manifest = json.loads((tmp_path / "step-000000002" / "burstd-checkpoint.json").read_text())
        assert manifest["reason"] == "preempt"
    finally:
        job.flag.uninstall()


def test_preemptible_sync_every_checks_only_every_k_steps(tmp_path):
    model, opt, *_ = _setup()
    job = Preemptible(tmp_path, model, opt, sync_every=4)
    try:
        job.flag.requested = True
        assert [job.should_stop(s) for s in range(1, 9)] == [False, False, False, True] * 2
    finally:
        job.flag.uninstall()


class _Pwn:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_in_a_checkpoint_runs_nothing_and_is_refused(tmp_path):
    """Issue 9 item 11: checkpoints sit on shared storage; the RNG/data file is loaded weights-only."""
    model, opt, *_ = _setup()
    CheckpointManager(tmp_path, model, opt).save(3)
    marker = tmp_path / "pwned"
    torch.save({"stateful": {}, "rng": _Pwn(marker)}, tmp_path / "step-000000003" / "extra-rank00000.pt")
    with pytest.raises(CheckpointMismatchError, match="weights-only loader refuses"):
        CheckpointManager(tmp_path, *_setup()[:2]).resume()
    assert not marker.exists()
