"""Preemptible without a fixed ``every``: the interval comes from the pool's rate and the measured save."""

from __future__ import annotations

import time

import pytest

from burstd.train.interval import RATE_ENV, choose_interval

pytestmark = [pytest.mark.torch]


@pytest.fixture(autouse=True, scope="module")
def _torch_imported():
    """torch loads when these tests run, not at collection (tests/conftest.py, the torch marker)."""
    global torch, CheckpointStore, Preemptible
    import torch

    from burstd.train import CheckpointStore, Preemptible


def _job(tmp_path, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Preemptible(tmp_path, model, opt, signals=("SIGUSR2",), **kw)


def _run(job, steps, step_s=0.0, sleep=time.sleep):
    for step in range(job.resume(), steps):
        sleep(step_s)
        job.step_done(step + 1)
    job.finish()


class _Clock:
    """The loop's clock, advanced only by the test: a save and a step cost what the test says, whatever the
    machine's load (a real first DCP save took 2.3 s on a loaded CI runner)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_rate_from_the_pool_picks_young_daly_after_timing_one_save_and_one_step(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RATE_ENV, "360")  # one preemption every 10 s: a short interval
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    monkeypatch.delenv("SLURM_NNODES", raising=False)
    clock = _Clock()
    monkeypatch.setattr("burstd.train.preemptible.time", clock)
    job = _job(tmp_path, keep=100)
    saved: list[int] = []
    real_save = job.manager.save

    def slow_save(step, **kw):  # a save that costs 0.3 s on the loop's clock
        saved.append(step)
        clock.sleep(0.3)
        return real_save(step, **kw)

    job.manager.save = slow_save  # type: ignore[method-assign]
    _run(job, 40, step_s=0.05, sleep=clock.sleep)
    assert job.interval is not None and job.every == job.interval.steps
    # the interval is the formula's for the measured figures: sqrt(2 * 0.3 * 10) ~ 2.4 s of 0.05 s steps
    expected = choose_interval(save_cost_s=0.3, step_s=0.05, preemptions_per_hour=360, nodes=1)
    assert job.every == expected.steps
    assert 10 <= job.every <= 80
    assert saved[0] == 1  # the timed save
    assert saved[1:] == [s for s in range(2, 41) if s % job.every == 0]
    err = capsys.readouterr().err
    assert f"checkpoint every {job.every} steps" in err and "Young/Daly" in err and f"{RATE_ENV}=360" in err
    assert CheckpointStore(str(tmp_path)).listing().latest is not None


def test_a_dearer_pool_checkpoints_more_often():
    calm = choose_interval(save_cost_s=0.3, step_s=0.05, preemptions_per_hour=1)
    stormy = choose_interval(save_cost_s=0.3, step_s=0.05, preemptions_per_hour=100)
    assert stormy.steps < calm.steps


def test_a_fixed_every_ignores_the_rate(tmp_path, monkeypatch):
    monkeypatch.setenv(RATE_ENV, "360")
    job = _job(tmp_path, every=7)
    _run(job, 15)
    assert job.interval is None and job.every == 7
    assert [c.step for c in CheckpointStore(str(tmp_path)).listing().complete] == [7, 14]


def test_without_a_rate_only_a_signal_checkpoints(tmp_path, monkeypatch):
    monkeypatch.delenv(RATE_ENV, raising=False)
    job = _job(tmp_path)
    _run(job, 10)
    assert job.every == 0 and job.interval is None
    assert CheckpointStore(str(tmp_path)).listing().latest is None


def test_a_malformed_rate_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(RATE_ENV, "often")
    with pytest.raises(ValueError, match=RATE_ENV):
        _job(tmp_path)
