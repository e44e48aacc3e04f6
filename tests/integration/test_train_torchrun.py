"""burstd.train under real torchrun (2 processes, CPU, gloo): preempt, checkpoint, resume, same weights.

The story each test tells: train N steps without interruption (the reference); train again, interrupt it in some
way (SIGUSR1 to the workers, SIGUSR1 to torchrun, a crash between shard write and manifest, SIGKILL with no notice);
run the same command again until it finishes; the final weights and optimizer state equal the reference bit for bit.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.testbed.procs import children, kill_tree
from tests.integration.torchrun_helpers import (
    REPO,
    REQUEUE,
    SEED,
    STEPS,
    assert_bit_identical,
    checkpoints,
    train_env,
)


pytestmark = [pytest.mark.torch, pytest.mark.slow]

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def _cmd(ckpt: Path, out: Path, *extra: str, nproc: int = 2, signals_to_handle: bool = False) -> list[str]:
    cmd = [TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0"]
    if signals_to_handle:
        cmd += ["--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", "--shutdown-timeout", "60"]
    return cmd + ["-m", "burstd.train.example", "--steps", str(STEPS), "--seed", str(SEED),
                  "--ckpt-dir", str(ckpt), "--out", str(out), *extra]


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, cwd=REPO, env=env or train_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)  # torchrun's workers too: never leave a rank behind
        out, err = proc.communicate()
        raise AssertionError(f"{cmd} ran over {timeout}s:\n{out[-2000:]}\n{err[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=env or train_env(), stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_for_step(log: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if re.search(rf"rank=\d step={step} ", log.read_text()):
            return
        if proc.poll() is not None:
            raise AssertionError(f"training exited early ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout}s:\n{log.read_text()[-3000:]}")


def _finish(proc: subprocess.Popen, timeout: float = 120) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise


_REFERENCES: dict[tuple[str, ...], Path] = {}


def _reference(tmp_path_factory, *flags: str) -> Path:
    """Final state of an uninterrupted run with these model flags (computed once per session)."""
    if flags not in _REFERENCES:
        d = tmp_path_factory.mktemp("reference")
        out = d / "final.pt"
        res = _run(_cmd(d / "ckpt", out, *flags))
        assert res.returncode == 0, res.stdout + res.stderr
        # each rank's line is one write: two ranks printing at once never share a line (burstd.train.example.say)
        shared = [line for line in res.stdout.splitlines() if line.count("rank=") > 1]
        assert not shared, shared[:3]
        _REFERENCES[flags] = out
    return _REFERENCES[flags]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return _reference(tmp_path_factory)


def _signal_lines(text: str) -> list[tuple[int, float]]:
    return [(int(r), float(t)) for r, t in re.findall(r"rank=(\d+) signal=\d+ received_at=([\d.]+)", text)]


def _steps_done_before(text: str, when: float) -> int:
    done = [int(s) for s, t in re.findall(r"rank=\d+ step=(\d+) t=([\d.]+)", text) if float(t) <= when]
    return max(done, default=0)


@pytest.mark.parametrize(
    "target,flags",
    [
        ("workers", ()),  # what burstd-agent does
        ("torchrun", ()),  # sbatch --signal forwarded to torchrun --signals-to-handle
        ("workers", ("--async-save", "--ckpt-every", "3")),  # a background save may be in flight
        ("workers", ("--ddp",)),  # DistributedDataParallel model
    ],
    ids=["to-workers", "to-torchrun", "async-periodic", "ddp"],
)
def test_sigusr1_mid_run_checkpoints_exits_for_requeue_and_resumes_bit_identical(tmp_path, tmp_path_factory,
                                                                                 target, flags):
    model_flags = tuple(f for f in flags if f == "--ddp")
    reference = _reference(tmp_path_factory, *model_flags)
    ckpt, out, log = tmp_path / "ckpt", tmp_path / "final.pt", tmp_path / "run1.log"
    proc = _start(_cmd(ckpt, out, "--step-sleep", "0.15", *flags, signals_to_handle=(target == "torchrun")), log)
    try:
        _wait_for_step(log, 8, proc)
        if target == "workers":  # what the node agent does: signal the training processes themselves
            workers = children(proc.pid)
            assert len(workers) == 2, workers
            for pid in workers[:1]:  # one rank is enough: the ranks agree on the stop step
                os.kill(pid, signal.SIGUSR1)
        else:  # sbatch --signal=B:USR1 forwarded to torchrun, which forwards it with --signals-to-handle
            os.kill(proc.pid, signal.SIGUSR1)
        rc = _finish(proc)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    text = log.read_text()
    assert rc != 0, "torchrun reports the workers' requeue exit as a failure"
    assert f"exitcode  : {REQUEUE}" in text or f"exit code {REQUEUE}" in text or "code 85" in text, text[-3000:]
    signals = _signal_lines(text)
    assert signals, text[-3000:]
    first_signal = min(t for _r, t in signals)
    done_at_signal = _steps_done_before(text, first_signal)
    saved = sorted(checkpoints(ckpt))
    assert saved, text[-3000:]
    assert done_at_signal <= saved[-1] <= done_at_signal + 1, (done_at_signal, saved)
    assert json.loads((ckpt / f"step-{saved[-1]:09d}" / "burstd-checkpoint.json").read_text())["reason"] == "preempt"
    assert not out.exists()

    res = _run(_cmd(ckpt, out, *flags))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"resumed from {ckpt}/step-{saved[-1]:09d}" in res.stdout + res.stderr
    assert_bit_identical(reference, out)


def test_torn_checkpoint_is_skipped_and_training_resumes_from_previous_complete_one(tmp_path, reference):
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.pt"
    # rank 0 dies (os._exit) after every shard of step 8 is on disk but before the manifest (--no-jit: else rank 1,
    # surviving, would save step 8 itself: tests/integration/test_train_survivor.py)
    res = _run(_cmd(ckpt, out, "--ckpt-every", "4", "--no-jit"), env=train_env(BURSTD_TRAIN_FAULT="before-manifest@8"))
    assert res.returncode != 0
    assert sorted(checkpoints(ckpt)) == [4]
    assert (ckpt / "step-000000008.partial").is_dir()

    res = _run(_cmd(ckpt, out, "--ckpt-every", "4"))
    log = res.stdout + res.stderr
    assert res.returncode == 0, log
    assert "step-000000008.partial" in log and "torn" in log
    assert f"resumed from {ckpt}/step-000000004" in log
    assert_bit_identical(reference, out)


def test_kill_without_notice_resumes_from_last_periodic_checkpoint(tmp_path, reference):
    ckpt, out, log = tmp_path / "ckpt", tmp_path / "final.pt", tmp_path / "run1.log"
    proc = _start(_cmd(ckpt, out, "--ckpt-every", "5", "--keep", "2", "--step-sleep", "0.1"), log)
    try:
        _wait_for_step(log, 13, proc)
        kill_tree(proc)  # the VM vanishes: no signal, no goodbye
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    # the kill lands at step 13 or, on a loaded machine, a step or two later: the last two periodic saves that
    # completed by then are kept (retention 2), a save the kill cut short never counts
    reached = max(int(m) for m in re.findall(r"rank=\d step=(\d+) ", log.read_text()))
    saved = sorted(checkpoints(ckpt))
    assert len(saved) == 2 and saved[1] - saved[0] == 5 and saved[1] % 5 == 0, saved
    assert 10 <= saved[1] <= reached, (saved, reached)
    res = _run(_cmd(ckpt, out, "--ckpt-every", "5", "--keep", "2"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"resumed from {ckpt}/step-{saved[1]:09d}" in res.stdout + res.stderr
    assert sorted(checkpoints(ckpt)) == [15, 20]
    assert_bit_identical(reference, out)


def test_interval_chosen_from_the_pools_rate_is_the_same_on_every_rank(tmp_path, reference):
    """No --ckpt-every and BURSTD_PREEMPT_RATE_PER_HOUR set: a timed save at step 1, then Young/Daly; both ranks
    must save at the same steps (a save is a collective), and the weights are those of the plain run."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.pt"
    res = _run(_cmd(ckpt, out, "--step-sleep", "0.05", "--keep", "100"), env=train_env(BURSTD_PREEMPT_RATE_PER_HOUR="3600"))
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-3000:]
    chosen = re.findall(r"burstd\.train: checkpoint every (\d+) steps .*Young/Daly", log)
    assert len(chosen) == 1, log[-3000:]  # printed by rank 0 only
    every = int(chosen[0])
    assert sorted(checkpoints(ckpt)) == [1] + [s for s in range(2, STEPS + 1) if s % every == 0]
    assert_bit_identical(reference, out)


def test_checkpoint_from_a_different_model_shape_is_a_clear_error(tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.pt"
    res = _run(_cmd(ckpt, out, "--ckpt-every", "4"))
    assert res.returncode == 0, res.stdout + res.stderr
    res = _run(_cmd(ckpt, tmp_path / "other.pt", "--size", "32"))
    log = res.stdout + res.stderr
    assert res.returncode != 0
    assert "does not fit the model" in log and "has shape (64, 16) in the checkpoint but (32, 16) here" in log
    assert "step=1 " not in log  # never a silent restart from step 0
    assert not (tmp_path / "other.pt").exists()


def test_unwritable_checkpoint_location_fails_before_training(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the checkpoint folder's parent should be")
    res = _run(_cmd(blocker / "ckpt", tmp_path / "final.pt"))
    log = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"checkpoint location {blocker}/ckpt is not writable" in log
    assert "step=1 " not in log


def _template_batch_shell(tmp_path: Path, job_id: int) -> tuple[dict[str, str], Path, Path]:
    """The environment a template's batch shell gets outside Slurm: ``scontrol`` is a shim recording its
    arguments (in the returned ``calls`` file), checkpoints go to the returned folder."""
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "scontrol.calls"
    (shim / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (shim / "scontrol").chmod(0o755)
    ckpt = tmp_path / "ckpt"
    env = train_env(PATH=f"{shim}:{os.environ['PATH']}", SLURM_JOB_ID=str(job_id), SLURM_JOB_NAME="t", CKPT_DIR=str(ckpt),
               NPROC="2", PYTHON=sys.executable, TORCHRUN="",  # the default: python -m burstd.train.launch
               TRAIN_ARGS=f"-m burstd.train.example --steps {STEPS} --seed {SEED} --step-sleep 0.15")
    return env, calls, ckpt


def test_single_node_sbatch_template_forwards_the_signal_and_requeues_then_resumes(tmp_path, reference):
    """The template run as the batch shell (outside Slurm; `scontrol` is a recording shim): Slurm's
    --signal=B:USR1 lands on the shell, the training checkpoints, the script requeues the job; the requeued run
    finishes with the reference weights."""
    env, calls, ckpt = _template_batch_shell(tmp_path, job_id=777)
    script = str(REPO / "sbatch_templates" / "torchrun-single-node.sbatch")
    log = tmp_path / "job.out"
    proc = _start(["bash", script], log, env=env)
    try:
        _wait_for_step(log, 8, proc)
        os.kill(proc.pid, signal.SIGUSR1)
        rc = _finish(proc)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    [saved] = sorted(checkpoints(ckpt))
    assert f"preempted on {socket.gethostname()} at step {saved}, checkpoint saved, requeued (job 777)" in text
    assert calls.read_text() == "requeue 777\n"
    # the researcher reads that one line, not torchrun's report of a failed child
    assert "Traceback" not in text and "ChildFailedError" not in text and "death signal" not in text, text

    env["SLURM_RESTART_COUNT"] = "1"
    res = _run(["bash", script], env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "training finished" in res.stdout and calls.read_text() == "requeue 777\n"
    assert_bit_identical(reference, ckpt / "final.pt")


def test_quiet_launch_still_reports_a_real_worker_failure_in_full(tmp_path):
    """burstd.train.launch is quiet only about a preemption: a worker that dies hard reads as torchrun's own."""
    ckpt = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "burstd.train.launch", *_cmd(ckpt, tmp_path / "final.pt", "--ckpt-every", "3")[1:]]
    res = _run(cmd, env=train_env(BURSTD_TRAIN_FAULT="before-manifest@6"))
    text = res.stdout + res.stderr
    assert res.returncode not in (0, REQUEUE), text[-3000:]
    assert "ChildFailedError" in text and "exitcode  : 137" in text, text[-3000:]


def test_single_node_sbatch_template_cancelled_with_sigterm_checkpoints_and_never_requeues(tmp_path):
    """`scancel` sends SIGTERM: the training still saves a checkpoint, but the job ends for good (no
    `scontrol requeue`), unlike a preemption's SIGUSR1 above."""
    env, calls, ckpt = _template_batch_shell(tmp_path, job_id=778)
    log = tmp_path / "job.out"
    proc = _start(["bash", str(REPO / "sbatch_templates" / "torchrun-single-node.sbatch")], log, env=env)
    try:
        _wait_for_step(log, 8, proc)
        os.kill(proc.pid, signal.SIGTERM)
        rc = _finish(proc)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    text = log.read_text()
    assert rc != 0 and "cancelled: not requeueing" in text, text[-3000:]
    assert not calls.exists(), "a cancelled job must not requeue itself"
    assert len(sorted(checkpoints(ckpt))) == 1  # the checkpoint is still saved
