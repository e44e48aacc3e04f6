"""DaemonProcess's lifecycle on a stand-in child (a shell that sleeps in place of ``python -m burstd.daemon.main``):
one child at a time, SIGTERM on stop, SIGKILL on kill, and nothing to do once it is gone."""

import signal
import sys

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


# A stand-in daemon on the unix socket: it answers /healthz at once, and /v1/status with no cycle for its first
# three reads, as burstd does between its API coming up and the end of its first cycle.
STAND_IN = '''
import http.server, json, os, socketserver, sys
socket_path, counter = sys.argv[1], sys.argv[2]
reads = 0
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global reads
        if self.path.startswith("/v1/status"):
            reads += 1
            open(counter, "w").write(str(reads))
            body = {"last_cycle": None if reads <= 3 else {"decisions": 0}}
        else:
            body = {"ok": True}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
    def address_string(self):
        return "unix"
socketserver.UnixStreamServer(socket_path, Handler).serve_forever()
'''


def _stand_in_daemon(tmp_path, script: str) -> tuple[DaemonProcess, object]:
    sock, counter = tmp_path / "burstd.sock", tmp_path / "status-reads"
    config = tmp_path / "burstd.toml"
    config.write_text(f'[api]\nsocket = "{sock}"\n')
    (tmp_path / "stand_in.py").write_text(script)
    python = tmp_path / "python"  # called as `python -m burstd.daemon.main ...`: runs the stand-in instead
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'stand_in.py'} {sock} {counter}\n")
    python.chmod(0o755)
    return DaemonProcess(config, log_path=tmp_path / "burstd.log", python=str(python)), counter


def test_first_cycle_is_awaited_past_the_api_answering(tmp_path):
    daemon, counter = _stand_in_daemon(tmp_path, STAND_IN)
    try:
        daemon.start()  # returns once /healthz answers
        daemon.wait_first_cycle(timeout=30)
        assert int(counter.read_text()) == 4  # three reads before the cycle, and the one that saw it
    finally:
        daemon.kill()


def test_a_daemon_that_dies_before_its_first_cycle_is_an_error_not_a_wait(tmp_path):
    daemon, _ = _stand_in_daemon(tmp_path, STAND_IN.replace("reads <= 3", "reads <= 1000000"))
    try:
        daemon.start()
        daemon.kill()
        daemon.wait_exit(5)
        with pytest.raises(RuntimeError, match="before its first cycle"):
            daemon.wait_first_cycle(timeout=30)
    finally:
        daemon.kill()
