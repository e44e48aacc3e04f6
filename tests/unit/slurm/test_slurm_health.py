"""slurmctld health: /readyz on 25.11+, `scontrol ping` before, chosen from the release (never by trying)."""

from __future__ import annotations

import http.server
import threading

import pytest

from burstd.config import SlurmConfig
from burstd.slurm.base import SlurmError
from burstd.slurm.cli import CliAdapter
from burstd.slurm.health import ctld_url

CONFIG_26 = """Configuration data as of 2026-11-24T07:40:00
MetricsType             = metrics/openmetrics
SlurmctldAddr           = (null)
SlurmctldHost[0]        = vm(10.127.0.1)
SlurmctldHost[1]        = backup(10.127.0.2)
SlurmctldPort           = 11817-11818
"""


class Scripted(CliAdapter):
    """The cli adapter with Slurm's answers scripted (the edge: the commands), version fixed."""

    def __init__(self, release: tuple[int, int], answers: dict[str, str | Exception]):
        super().__init__(SlurmConfig(command_timeout_s=2.0))
        self._version = release
        self.answers = answers
        self.ran: list[list[str]] = []

    def run(self, cmd, args):
        self.ran.append([cmd, *args])
        out = self.answers[" ".join([cmd, *args])]
        if isinstance(out, Exception):
            raise out
        return out


@pytest.mark.parametrize(("text", "url"), [
    (CONFIG_26, "http://10.127.0.1:11817"),
    ("SlurmctldHost[0] = head\nSlurmctldPort = 6817\n", "http://head:6817"),
    ("SlurmctldAddr = 10.0.0.9\nSlurmctldHost[0] = head(10.0.0.1)\nSlurmctldPort = 6817\n", "http://10.0.0.9:6817"),
])
def test_ctld_url_is_the_primary_controllers_address_and_port(text, url):
    assert ctld_url(text) == url


@pytest.mark.parametrize("text", ["SlurmctldPort = 6817\n", "SlurmctldHost[0] = a b;c\nSlurmctldPort = 6817\n",
                                  "SlurmctldHost[0] = head\n"])
def test_ctld_url_refuses_a_config_without_host_or_port(text):
    with pytest.raises(ValueError):
        ctld_url(text)


def test_before_25_11_health_is_scontrol_ping():
    up = Scripted((24, 11), {"scontrol ping": "Slurmctld(primary) at head is UP\n"})
    assert up.ctld_health() == {"ok": True, "via": "scontrol ping", "detail": "Slurmctld(primary) at head is UP"}
    down = Scripted((22, 5), {"scontrol ping": SlurmError("scontrol ping failed (exit 1): ... is DOWN")})
    health = down.ctld_health()
    assert health["ok"] is False and health["via"] == "scontrol ping" and "DOWN" in health["detail"]
    assert down.ran == [["scontrol", "ping"]]


@pytest.fixture
def readyz():
    """A local HTTP server standing in for slurmctld's port: answers /readyz with ``status[0]``."""
    status = [204]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(status[0] if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], status
    server.shutdown()
    server.server_close()


def test_from_25_11_health_is_readyz_on_slurmctlds_own_port(readyz):
    port, status = readyz
    adapter = Scripted((26, 5), {"scontrol show config": f"SlurmctldHost[0] = vm(127.0.0.1)\nSlurmctldPort = {port}\n"})
    health = adapter.ctld_health()
    assert health == {"ok": True, "via": "readyz", "url": f"http://127.0.0.1:{port}/readyz", "detail": "204"}
    status[0] = 503  # running, not servicing RPCs
    health = adapter.ctld_health()
    assert health["ok"] is False and health["detail"].startswith("503")
    assert adapter.ran == [["scontrol", "show", "config"]]  # read once; never `scontrol ping`


def test_readyz_unreachable_is_not_ready(readyz):
    port, _ = readyz
    adapter = Scripted((25, 11), {"scontrol show config": "SlurmctldHost[0] = vm(127.0.0.1)\nSlurmctldPort = 1\n"})
    health = adapter.ctld_health()
    assert health["ok"] is False and health["via"] == "readyz" and health["detail"]


def test_slurm_commands_missing_is_not_ready_never_an_exception(tmp_path):
    adapter = CliAdapter(SlurmConfig(bin_dir=str(tmp_path), command_timeout_s=2.0))
    health = adapter.ctld_health()
    assert health["ok"] is False and "not found" in health["detail"]
