"""burstd-agent telling the daemon about a notice (burstd/agent/report.py): the daemon's notice shape over its
unix socket, and a daemon that is gone is logged and answered False, never raised."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from burstd.agent.report import DaemonUnreachable, get_from_daemon, report_notice
from burstd.domain.preemption import Notice


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        sock, _ = super().get_request()
        return sock, ("local", 0)


@contextmanager
def _serving(sock: str, handler: type[BaseHTTPRequestHandler]) -> Iterator[None]:
    """A daemon stand-in answering on the unix socket ``sock`` until the block ends (then gone)."""
    srv = _UnixServer(sock, handler)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield
    finally:
        srv.shutdown()
        srv.server_close()


def test_report_posts_the_daemon_notice_shape_over_a_unix_socket(tmp_path):
    got = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            got.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(202)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    sock = str(tmp_path / "burstd.sock")
    n = Notice("interruption", "terminate", 1_900_000_100.0, "local")
    with _serving(sock, H):
        assert report_notice(f"unix:{sock}", "cloud3", n) is True
        path, body = got[0]
        assert path == "/v1/notices"
        assert body["node"] == "cloud3" and body["kind"] == "spot-interruption"
        assert body["deadline"] == 1_900_000_100.0 and body["detail"].startswith("burstd-preempt:")
    # the daemon gone: logged, False, never raised
    assert report_notice(f"unix:{sock}", "cloud3", n) is False


def test_get_from_daemon_answers_the_body_none_for_404_and_raises_naming_the_path_otherwise(tmp_path):
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            status = {"/v1/ok": 200, "/v1/absent": 404}.get(self.path, 503)
            self.send_response(status)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"busy" if status == 503 else b"[42]")

        def log_message(self, *a):
            pass

    sock = str(tmp_path / "burstd.sock")
    with _serving(sock, H):
        answer = get_from_daemon(f"unix:{sock}", "/v1/ok")
        assert answer is not None and answer.json() == [42]
        assert get_from_daemon(f"unix:{sock}", "/v1/absent") is None
        with pytest.raises(DaemonUnreachable, match="daemon answered 503 for /v1/down: busy"):
            get_from_daemon(f"unix:{sock}", "/v1/down")
    with pytest.raises(DaemonUnreachable, match="daemon unreachable at unix:"):
        get_from_daemon(f"unix:{sock}", "/v1/ok")


def test_slurm_conf_comes_from_the_flag_the_file_or_the_environment(monkeypatch):
    from burstd.agent.main import _parser, build_config

    monkeypatch.setenv("SLURM_CONF", "/from/env/slurm.conf")
    _, slurm = build_config(_parser().parse_args([]))
    assert slurm.conf == "/from/env/slurm.conf"  # the adapter scrubs SLURM_*: it must be named explicitly
    _, slurm = build_config(_parser().parse_args(["--slurm-conf", "/flag/slurm.conf"]))
    assert slurm.conf == "/flag/slurm.conf"
