"""DaemonProcess's lifecycle on a stand-in child (a shell that sleeps in place of ``python -m burstd.daemon.main``):
one child at a time, SIGTERM on stop, SIGKILL on kill, and nothing to do once it is gone; and the waits for its
API and its first cycle, against a stand-in API on its socket (``tests.fakes.unix_api``)."""

import signal

import pytest

from burstd.testbed.daemon_process import DaemonProcess
from tests.fakes.unix_api import UnixJsonApi


@pytest.fixture
def daemon(tmp_path):
    config = tmp_path / "burstd.toml"
    config.write_text(f'[api]\nsocket = "{tmp_path}/burstd.sock"\n')
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


def test_first_cycle_is_awaited_past_the_api_answering(daemon, tmp_path):
    # burstd's API between coming up and the end of its first cycle: /healthz answers, /v1/status shows no cycle
    # for three reads. The child is the fixture's sleeping stand-in; the API is served here.
    reads = []

    def answer(path):
        if not path.startswith("/v1/status"):
            return 200, {"ok": True}
        reads.append(path)
        return 200, {"last_cycle": None if len(reads) <= 3 else {"decisions": 0}}

    api = UnixJsonApi(daemon.socket, answer)
    try:
        daemon.start()  # returns once /healthz answers
        daemon.wait_first_cycle(timeout=30)
        assert len(reads) == 4  # three reads before the cycle, and the one that saw it
    finally:
        api.close()


def test_a_daemon_that_dies_before_its_first_cycle_is_an_error_not_a_wait(daemon):
    api = UnixJsonApi(daemon.socket, lambda path: (200, {"ok": True, "last_cycle": None}))
    try:
        daemon.start()
        daemon.kill()
        daemon.wait_exit(5)
        with pytest.raises(RuntimeError, match="before its first cycle"):
            daemon.wait_first_cycle(timeout=30)
    finally:
        api.close()
