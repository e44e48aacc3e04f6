"""A training job reports its own progress (issue 26 item 2, the job's side): paced reports with the mean step
time, GPU use from NVML where there is one, never in the way of training; end to end, a real ``Preemptible`` loop
seals its reports with real MUNGE and the daemon's API (over TLS) takes them as that job's."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from burstd.train.gpu import gpu_utilization
from burstd.train.progress import ProgressReporter
from tests.unit.daemon.test_job_progress import daemon, munged  # noqa: F401 - the fixtures


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def reporter(clock: Clock, sent: list, **kw) -> ProgressReporter:
    def post(url, path, credential, ca):
        sent.append((path, credential))
        return 202

    return ProgressReporter("https://head:8787", 42, every_s=30, seal=lambda p: p.decode(), post=post,
                            gpu=lambda: [50.0, 70.0], clock=clock, **kw)


def test_reports_come_at_most_every_interval_with_the_mean_step_time_and_gpu_use():
    clock, sent = Clock(), []
    r = reporter(clock, sent, steps_per_epoch=500)
    r.step_done(1)  # the first step marks the start
    for step in range(2, 62):
        clock.t += 0.5
        r.step_done(step)
        r.close()
    assert [p for p, _ in sent] == ["/v1/jobs/42/progress"]  # 30 s of 0.5 s steps: one report
    body = json.loads(sent[0][1])
    assert body == {"job": 42, "step": 61, "step_time_s": 0.5, "gpu_util": [50.0, 70.0], "steps_per_epoch": 500}


def test_a_report_that_cannot_go_never_stops_training_and_is_said_once(capsys):
    clock = Clock()

    def refuse(url, path, credential, ca):
        raise OSError("connection refused")

    r = ProgressReporter("https://head:8787", 42, every_s=1, seal=lambda p: "cred", post=refuse,
                         gpu=lambda: None, clock=clock)
    for step in range(1, 6):
        clock.t += 2
        r.step_done(step)
        r.close()
    assert r.failed == 4 and r.sent == 0
    assert capsys.readouterr().err.count("progress report not sent") == 1


def test_no_url_or_no_slurm_job_means_no_reporter():
    assert ProgressReporter.from_env({"SLURM_JOB_ID": "5"}) is None
    assert ProgressReporter.from_env({"BURSTD_PROGRESS_URL": "https://h:1"}) is None
    assert ProgressReporter.from_env({"BURSTD_PROGRESS_URL": "https://h:1", "SLURM_JOB_ID": "5"}).job_id == 5


FAKE_NVML = r"""
typedef struct { unsigned gpu, memory; } util_t;
static int inited;
int nvmlInit_v2(void) { inited = 1; return 0; }
int nvmlShutdown(void) { inited = 0; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 4; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { *h = (void *)(long)(i + 1); return inited ? 0 : 1; }
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) { u->gpu = 10 * (unsigned)(long)h; u->memory = 0; return 0; }
"""


def test_gpu_utilization_reads_the_jobs_gpus_through_nvml_and_is_none_without_it(tmp_path):
    assert gpu_utilization(library=str(tmp_path / "libnvidia-ml-missing.so")) is None
    src = tmp_path / "nvml.c"
    src.write_text(FAKE_NVML)
    lib = tmp_path / "libfake-nvml.so"
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no C compiler for the stand-in driver library")
    assert gpu_utilization({"SLURM_STEP_GPUS": "1,3"}, library=str(lib)) == [20.0, 40.0]
    assert gpu_utilization({"CUDA_VISIBLE_DEVICES": "GPU-uuid"}, library=str(lib)) == [10.0, 20.0, 30.0, 40.0]


def test_a_preemptible_loop_reports_to_the_daemon_as_its_own_job(daemon, tmp_path, monkeypatch):  # noqa: F811
    torch = pytest.importorskip("torch")
    client, rec, private = daemon
    monkeypatch.setenv("BURSTD_PROGRESS_URL", str(client.base_url))
    monkeypatch.setenv("BURSTD_PROGRESS_CA", client.ca)
    monkeypatch.setenv("BURSTD_PROGRESS_EVERY_S", "0.2")
    monkeypatch.setenv("MUNGE_SOCKET", private.socket)
    monkeypatch.setenv("SLURM_JOB_ID", "10")  # root's job on cloud1 (127.0.0.1): this process is root there
    from burstd.train.preemptible import Preemptible

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    job = Preemptible(tmp_path / "ckpt", model, opt, every=0, steps_per_epoch=20)
    for step in range(job.resume(), 12):
        time.sleep(0.05)
        job.step_done(step + 1)
    job.finish()
    assert job.progress is not None and job.progress.sent >= 1, job.progress.last_error if job.progress else None
    seen = rec.progress.get(10)
    assert seen is not None and 2 <= seen.step <= 12 and seen.side == "cloud"
    assert seen.step_time_s == pytest.approx(0.05, rel=0.8)
    assert seen.cost_per_epoch_micros == pytest.approx(seen.cost_per_step_micros * 20)
