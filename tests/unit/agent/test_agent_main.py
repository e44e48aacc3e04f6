"""burstd-agent end to end in one process: real metadata server, real scan, a recording scontrol."""

from __future__ import annotations

import os
import stat

from burstd.agent.main import main
from burstd.domain.preemption import parse_preemption_reason
from burstd.providers.local.metadata import Identity, MetadataServer, announce_preemption


def _fake_scontrol(bin_dir, log):
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_once_drains_the_node_through_scontrol_with_the_deadline(tmp_path):
    srv = MetadataServer(tmp_path / "vm", Identity("i-1", "cloud3"), "127.0.0.1", 0).start()
    try:
        _fake_scontrol(tmp_path / "bin", tmp_path / "argv")
        deadline = announce_preemption(srv.state_dir, 120)
        rc = main(
            [
                "--once",
                "--provider",
                "local",
                "--metadata-url",
                srv.url,
                "--node",
                "cloud3",
                "--slurm-bin-dir",
                str(tmp_path / "bin"),
            ]
        )
        assert rc == 0
        argv = (tmp_path / "argv").read_text().splitlines()
        assert argv[:3] == ["update", "nodename=cloud3", "state=DRAIN"]
        assert argv[3].startswith("reason=")
        assert parse_preemption_reason(argv[3].removeprefix("reason=")).deadline == deadline
    finally:
        srv.stop()


def test_no_notice_touches_nothing(tmp_path):
    srv = MetadataServer(tmp_path / "vm", Identity("i-1", "cloud3"), "127.0.0.1", 0).start()
    try:
        _fake_scontrol(tmp_path / "bin", tmp_path / "argv")
        assert (
            main(
                [
                    "--once",
                    "--provider",
                    "local",
                    "--metadata-url",
                    srv.url,
                    "--node",
                    "cloud3",
                    "--slurm-bin-dir",
                    str(tmp_path / "bin"),
                ]
            )
            == 0
        )
        assert not os.path.exists(tmp_path / "argv")
    finally:
        srv.stop()


def test_bad_signal_flag_is_a_clear_error(capsys):
    assert main(["--once", "--signal", "NOPE"]) == 2
    assert "NOPE" in capsys.readouterr().err


def test_report_posts_the_daemon_notice_shape_over_a_unix_socket(tmp_path):
    import json
    import socketserver
    import threading
    from http.server import BaseHTTPRequestHandler

    from burstd.agent.report import report_notice
    from burstd.domain.preemption import Notice

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
