"""Training progress in ``burstctl jobs`` and ``explain`` (issue 26 item 2): steps, step time and cost per step
where the job reports them; at 80 columns the progress columns go first and the table says so."""

from __future__ import annotations

from burstd.cli import common
from burstd.cli.jobs_cmd import _print_jobs, _print_training, progress_sentence, small_usd

PROGRESS = {"job_id": 7, "account": "chem", "user": "alice", "side": "cloud", "nodes": "cloud1", "step": 1200,
            "step_time_s": 0.72, "gpu_util": 70.0, "steps_per_epoch": 1000, "price_per_hour_micros": 500_000,
            "reported_at": 1000.0, "first_reported_at": 900.0, "reports": 3,
            "cost_per_step_micro_usd": 100.0, "cost_per_epoch_micro_usd": 100_000.0}
STORY = {"job_id": 7, "account": "chem", "user": "alice", "state": "running", "nodes": ["cloud1"],
         "pools": ["aws-spot"], "first_start": 900.0, "last_end": None, "preemptions": 1, "requeues": 1,
         "cost_micro_usd": 120_000, "progress": PROGRESS}


def test_the_progress_sentence_names_steps_step_time_gpu_and_cost_per_step_and_epoch():
    assert progress_sentence(PROGRESS, now=1012.0) == (
        "training: step 1,200, 0.72 s/step, GPU 70%, $0.0001/step ($0.10/epoch), reported 12 s ago")
    onprem = dict(PROGRESS, side="onprem", gpu_util=None, cost_per_step_micro_usd=None, cost_per_epoch_micro_usd=None)
    assert progress_sentence(onprem, now=1000.0) == "training: step 1,200, 0.72 s/step, on-prem, reported 0 s ago"
    assert small_usd(124.0) == "$0.000124" and small_usd(None) == "-"


def test_jobs_shows_progress_wide_and_drops_it_first_at_80_columns(monkeypatch, capsys):
    monkeypatch.setattr(common.console, "_width", 200)
    _print_jobs([STORY], wide=False)
    wide = capsys.readouterr().out
    assert "1,200" in wide and "$0.0001" in wide and "0.72" in wide
    monkeypatch.setattr(common.console, "_width", 80)
    _print_jobs([STORY], wide=False)
    narrow = capsys.readouterr().out
    assert max(len(x) for x in narrow.splitlines()) <= 80, narrow
    assert "step, s/step, $/step not shown (--wide shows all)" in narrow
    assert "$0.12" in narrow and "chem/alice" in narrow  # the job's own cost and owner stay


def test_training_lists_every_reporting_job_with_its_side(monkeypatch, capsys):
    monkeypatch.setattr(common.console, "_width", 120)
    _print_training([PROGRESS, dict(PROGRESS, job_id=8, side="onprem", cost_per_step_micro_usd=None,
                                    cost_per_epoch_micro_usd=None, gpu_util=None)], wide=False)
    out = capsys.readouterr().out
    assert "onprem" in out and "cloud" in out and "70%" in out and "$0.1" in out
    _print_training([], wide=False)
    assert "BURSTD_PROGRESS_URL" in capsys.readouterr().out
