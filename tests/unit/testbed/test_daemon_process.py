"""DaemonProcess's lifecycle on a stand-in child (a shell that sleeps in place of ``python -m burstd.daemon.main``):
one child at a time, SIGTERM on stop, SIGKILL on kill, and nothing to do once it is gone."""

import signal

import pytest

from burstd.testbed.daemon_process import DaemonProcess


@pytest.fixture
def daemon(tmp_path):
    config = tmp_path / "burstd.toml"
    config.write_text('[api]\nsocket = "/nonexistent/burstd.sock"\n')
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec sleep 60\n")
    python.chmod(0o755)
    d = DaemonProcess(config, log_path=tmp_path / "burstd.log", python=str(python))
    yield d
    d.kill()


def test_one_child_at_a_time_stopped_with_sigterm(daemon):
    assert not daemon.running and daemon.pid is None and daemon.wait_exit(1) is None
    daemon.start(wait=False)
    assert daemon.running and daemon.pid
    with pytest.raises(RuntimeError, match=f"already runs \\(pid {daemon.pid}\\)"):
        daemon.start(wait=False)
    daemon.stop(grace_s=10)
    assert not daemon.running and daemon.wait_exit(1) == -signal.SIGTERM
    daemon.stop()  # gone already: nothing to signal
    assert daemon.starts == 1


def test_kill_is_sigkill_and_a_dead_child_can_be_started_again(daemon):
    daemon.start(wait=False)
    daemon.kill()
    assert not daemon.running and daemon.wait_exit(1) == -signal.SIGKILL
    daemon.kill()  # nothing left to kill
    daemon.start(wait=False)
    assert daemon.running and daemon.starts == 2
