"""burstd.train.launch: a preemption's planned exit is quiet, every other failure reads as torchrun's."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.train.launch import _PlannedStopFilter, planned_stop, torchrun_handles


@pytest.mark.parametrize("codes, planned", [
    ([85, 85], True),
    ([85, -15], True),      # the peer torchrun stopped on its way out
    ([85], True),
    ([1, 85], False),       # the first to fail crashed
    ([85, 1], False),       # a peer crashed
    ([-9, 85], False),      # the first was killed (OOM killer): a real failure
    ([], False),
])
def test_planned_stop(codes, planned):
    assert planned_stop(codes, 85) is planned


@pytest.mark.parametrize("args, sig, handles", [
    (["--nnodes=1", "--signals-to-handle=SIGTERM,SIGUSR1", "-m", "train"], signal.SIGUSR1, True),
    (["--nnodes", "1", "--signals-to-handle", "SIGTERM,USR1", "train.py"], signal.SIGUSR1, True),
    (["--signals_to_handle=SIGUSR1", "train.py"], signal.SIGUSR1, True),
    (["--nnodes=1", "train.py"], signal.SIGUSR1, False),             # torchrun's own list has no SIGUSR1
    (["--nnodes=1", "train.py"], signal.SIGTERM, True),
    (["-m", "train", "--signals-to-handle=SIGUSR1"], signal.SIGUSR1, False),  # the training module's argument
    (["--signals-to-handle=SIGNOPE,SIGUSR1", "train.py"], signal.SIGUSR1, True),  # torchrun skips the bad name
    (["--signals-to-handle=SIGNOPE", "train.py"], signal.SIGUSR1, False),
])
def test_torchrun_handles_reads_its_signals_to_handle(args, sig, handles):
    assert torchrun_handles(args, sig) is handles


def _record(msg, *args):
    return logging.LogRecord("torch.distributed.elastic.multiprocessing.api", logging.ERROR, __file__, 1, msg,
                             args, None)


def test_filter_drops_only_the_planned_stop_lines_and_holds_the_stopping_of_peers():
    f = _PlannedStopFilter(85, signal.SIGUSR1)
    assert not f.filter(_record("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", 85, 0, 1, "x"))
    assert not f.filter(_record("Received %s death signal, shutting down workers", signal.SIGUSR1))
    assert not f.filter(_record("Sending process %s closing signal %s", 12, "SIGUSR1"))
    assert f.filter(_record("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", 1, 0, 1, "x"))
    assert f.filter(_record("Received %s death signal, shutting down workers", signal.SIGTERM))
    assert not f.filter(_record("Sending process %s closing signal %s", 12, "SIGTERM"))  # held, see below
    assert len(f.held) == 1


def test_lines_about_stopping_the_other_workers_are_held_and_released_for_a_real_failure():
    logger = logging.getLogger("burstd.test.launch")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    f = _PlannedStopFilter(85, signal.SIGUSR1)
    logger.addFilter(f)
    try:
        logger.warning("Sending process %s closing signal %s", 12, "SIGTERM")
        logger.warning("something else")
        assert seen == ["something else"]
        f.release()
        assert seen == ["something else", "Sending process 12 closing signal SIGTERM"]
        assert f.held == []
    finally:
        logger.removeFilter(f)
        logger.removeHandler(handler)


def _wait_until_caught(pid: int, sig: signal.Signals, timeout_s: float = 30.0) -> bool:
    """Whether ``pid`` catches ``sig`` (a handler of its own: /proc's SigCgt) before it exits or the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
        if caught & (1 << (int(sig) - 1)):
            return True
        time.sleep(0.001)
    return False


def _launch(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """``python -m burstd.train.launch ARGS train.py``, and the file its worker would create on starting."""
    started = tmp_path / "worker-started"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(started)!r}, 'w').close()\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "burstd.train.launch", *args, "--nproc-per-node=1", "--master-addr=127.0.0.1",
         str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BURSTD_REQUEUE_EXIT_CODE": "85", "BURSTD_PREEMPT_SIGNAL": "SIGUSR1"})
    return proc, started


@pytest.mark.parametrize("handled", [True, False])
def test_a_preemption_signal_before_the_workers_start_ends_the_launch_with_the_requeue_code(tmp_path, handled):
    """burstd-agent signals a just-started job's leaf process, the launcher, while it still imports torch: a
    plain torchrun dies of it and the job fails. This one exits with the requeue code and starts no worker; it
    stands in for torchrun's handler only where torchrun would put one (--signals-to-handle), else it would
    stay for the whole run."""
    signals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT" + (",SIGUSR1" if handled else "")
    proc, started = _launch(tmp_path, "--nnodes=1", "--master-port=0", f"--signals-to-handle={signals}")
    try:
        if handled:
            assert _wait_until_caught(proc.pid, signal.SIGUSR1), "the launcher never caught SIGUSR1"
        else:
            time.sleep(0.2)  # into its imports
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert not started.exists(), "a worker started after the preemption signal"
    if handled:
        assert proc.returncode == 85, (proc.returncode, err)
        assert "SIGUSR1 before the workers started: nothing to save" in err, err
        assert "Traceback" not in err, err
    else:
        assert proc.returncode == -signal.SIGUSR1, (proc.returncode, err)  # as plain torchrun: no handler left


def test_a_preemption_signal_in_a_multi_node_rendezvous_ends_the_launch_too(tmp_path, free_tcp_port):
    """The first node's launcher waits inside torch's C++ store for the second node, where Python runs no signal
    handler: the watcher thread ends it with the requeue code (before, the signal killed it outright)."""
    proc, started = _launch(tmp_path, "--nnodes=2", "--node-rank=0", f"--master-port={free_tcp_port}",
                            "--signals-to-handle=SIGTERM,SIGUSR1")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # its store listens: it is in the rendezvous, waiting for node 1
            assert proc.poll() is None, proc.communicate()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", free_tcp_port)) == 0:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("the launcher never reached its rendezvous")
        time.sleep(0.5)  # into the wait
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 85, (proc.returncode, err)
    assert "SIGUSR1 before the workers started (in the rendezvous): nothing to save" in err, err
    assert not started.exists()
