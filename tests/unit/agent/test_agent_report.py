"""burstd-agent telling the daemon about a notice (burstd/agent/report.py): the daemon's notice shape over its
unix socket, and a daemon that is gone is logged and answered False, never raised."""

from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler

from burstd.agent.report import report_notice
from burstd.domain.preemption import Notice


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

    class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

        def get_request(self):
            sock, _ = super().get_request()
            return sock, ("local", 0)

    sock = str(tmp_path / "burstd.sock")
    srv = S(sock, H)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    try:
        n = Notice("interruption", "terminate", 1_900_000_100.0, "local")
        assert report_notice(f"unix:{sock}", "cloud3", n) is True
        path, body = got[0]
        assert path == "/v1/notices"
        assert body["node"] == "cloud3" and body["kind"] == "spot-interruption"
        assert body["deadline"] == 1_900_000_100.0 and body["detail"].startswith("burstd-preempt:")
    finally:
        srv.shutdown()
        srv.server_close()
    # the daemon gone: logged, False, never raised
    assert report_notice(f"unix:{sock}", "cloud3", n) is False


def test_slurm_conf_comes_from_the_flag_the_file_or_the_environment(monkeypatch):
    from burstd.agent.main import _parser, build_config

    monkeypatch.setenv("SLURM_CONF", "/from/env/slurm.conf")
    _, slurm = build_config(_parser().parse_args([]))
    assert slurm.conf == "/from/env/slurm.conf"  # the adapter scrubs SLURM_*: it must be named explicitly
    _, slurm = build_config(_parser().parse_args(["--slurm-conf", "/flag/slurm.conf"]))
    assert slurm.conf == "/flag/slurm.conf"
