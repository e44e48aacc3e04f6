"""No client can starve the daemon (issue 21, item 3): caps per listener and per peer, silent connections dropped,
a descriptor reserve, repeated log lines limited. Real uvicorn on a real unix socket and a real TLS listener,
flooded from another process; the daemon's edges are fakes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import httpx
import pytest

from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.config import parse_config
from burstd.daemon.client import ApiClient
from burstd.daemon.conn_guard import PRIVILEGED_RESERVE, ConnectionBudget, ensure_descriptor_reserve
from burstd.daemon.logging import RepeatLimit
from burstd.daemon.metrics import Metrics
from burstd.daemon.reconcile import Reconciler
from burstd.testbed.procs import free_port
from tests.fakes.tls import make_tls
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}
CAP, PER_PEER = 16, 4


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------------------------------- pure parts
def test_the_budget_caps_the_total_and_each_peer_and_gives_slots_back():
    b = ConnectionBudget("t", total=5, per_peer=2)
    assert [b.admit("a"), b.admit("a"), b.admit("a")] == [True, True, False]  # a's third: over its cap
    assert [b.admit("b"), b.admit("b"), b.admit("c")] == [True, True, True]
    assert not b.admit("d")  # the total is reached, whoever asks
    assert b.open == 5 and b.refused == 2
    b.release("a")
    assert b.admit("d") and not b.admit("d")


def test_privileged_peers_skip_the_per_peer_cap_and_keep_a_reserve_above_the_total():
    b = ConnectionBudget("t", total=3, per_peer=1, privileged=frozenset({0}))
    assert all(b.admit(f"u{i}") for i in range(3))
    assert not b.admit("u9")
    admitted_root = sum(b.admit(0) for _ in range(PRIVILEGED_RESERVE + 5))
    assert admitted_root == PRIVILEGED_RESERVE  # root gets in during a flood, but not without bound


def test_the_repeat_limit_drops_a_flood_and_says_how_many_it_dropped():
    now = [0.0]
    limit = RepeatLimit(burst=3, window_s=60, clock=lambda: now[0])

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, None, None)

    passed = [limit.filter(rec("socket.accept() out of system resource")) for _ in range(1000)]
    assert sum(passed) == 3
    assert limit.filter(rec("another message"))  # other kinds are not held back
    now[0] = 61.0
    after = rec("socket.accept() out of system resource")
    assert limit.filter(after)
    assert after.burstd_fields["suppressed_repeats"] == 997  # type: ignore[attr-defined]


def test_a_hard_descriptor_limit_too_low_for_the_caps_refuses_to_start(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 1024))
    with pytest.raises(RuntimeError, match="LimitNOFILE"):
        ensure_descriptor_reserve(4096)
    raised: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "setrlimit", lambda _, lim: raised.append(lim))
    assert ensure_descriptor_reserve(64) > 256 and raised and raised[0][1] == 1024


# ---------------------------------------------------------------------------------------------- live listener
@pytest.fixture
def served(tmp_path):
    run = tempfile.mkdtemp(prefix="burstd-flood-")
    os.chmod(run, 0o755)
    tls = make_tls(tmp_path)
    token = tmp_path / "admin.token"
    token.write_text("admin-s3cret\n")
    token.chmod(0o600)
    port = free_port()
    cfg = parse_config({
        "api": {"socket": f"{run}/burstd.sock", "tcp_listen": f"127.0.0.1:{port}", "token_file": str(token),
                "tls_cert": str(tls.cert), "tls_key": str(tls.key), "max_connections": CAP,
                "max_connections_per_peer": PER_PEER, "header_timeout_s": 1},
        "daemon": {"state_dir": str(tmp_path / "state")},
        "pools": [POOL],
    })
    clock = FakeClock()
    rec = Reconciler(cfg, FakeStore(clock), FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule,
                     clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    yield cfg, port, str(tls.ca), server
    server.stop()


FLOOD = textwrap.dedent("""
    import socket, sys, time
    host, port, count, source = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    family = socket.AF_UNIX if port == 0 else socket.AF_INET
    conns = []
    for _ in range(count):
        s = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET:
            s.bind((source, 0))
        s.connect(host if family == socket.AF_UNIX else (host, port))
        conns.append(s)
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[5])
    for s in conns:  # every connection must be closed by the server: refused at once, or silent past the timeout
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = s.recv(1)
        except (TimeoutError, socket.timeout):
            print("still-open", flush=True)
            continue
        except OSError:
            data = b""
        print("closed" if data == b"" else "data", flush=True)
""")


def _flood(target: str, port: int, count: int, wait_s: float, source: str = "127.0.0.2") -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", FLOOD, target, str(port), str(count), source, str(wait_s)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_a_flood_of_idle_tls_connections_leaves_the_daemon_its_descriptors_and_other_clients(served):
    cfg, port, ca, server = served
    before = _open_fds()
    flood = _flood("127.0.0.1", port, 400, wait_s=8)  # from 127.0.0.2, as a job on a cloud node would
    [tcp] = [b for b in server.budgets if b.name == "tcp"]
    _until(lambda: tcp.refused >= 400 - PER_PEER)
    # the daemon's side holds at most one peer's cap of them, not 400
    assert _open_fds() - before <= PER_PEER + 2
    assert tcp.open <= PER_PEER
    # another node's agent, and an admin on the unix socket, are served meanwhile
    with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ca,
                      headers={"Authorization": "Bearer admin-s3cret"}, timeout=5) as c:
        assert c.get("/v1/status").status_code == 200
    assert ApiClient(cfg.api.socket).get("/v1/status")["cluster"] == "burstd"
    # the silent ones (a TLS handshake never begun) are dropped after header_timeout_s (1 s), not asyncio's 60 s
    out, _ = flood.communicate(timeout=30)
    assert out.split().count("closed") == 400, out
    assert tcp.open == 0


def test_a_local_user_cannot_fill_the_unix_socket_and_silent_connections_are_closed(served):
    cfg, _, _, server = served
    # modules first: the interpreter's own files need not be readable by nobody
    prelude = "import os, socket, sys, time; os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
    os.chmod(cfg.api.socket, 0o666)  # nobody may connect here; the caps, not the mode, are under test
    p = subprocess.Popen([sys.executable, "-c", prelude + FLOOD, cfg.api.socket, "0", "100", "", "8"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    unix = server.budgets[0]
    _until(lambda: unix.refused >= 100 - PER_PEER)
    assert unix.open <= PER_PEER
    assert ApiClient(cfg.api.socket).get("/v1/status")["cluster"] == "burstd"  # root: exempt from nobody's flood
    out, _ = p.communicate(timeout=30)
    assert out.split().count("closed") == 100, out  # refused at once, or closed after 1 s of silence


def test_the_metrics_port_caps_connections_and_times_out_idle_ones():
    m = Metrics()
    port = free_port()
    httpd = m.serve(port, "127.0.0.1")
    try:
        flood = _flood("127.0.0.1", port, 100, wait_s=15)
        _until(lambda: httpd.budget.refused >= 100 - httpd.budget.per_peer)  # it accepts one at a time
        assert httpd.budget.open <= httpd.budget.per_peer
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
        out, _ = flood.communicate(timeout=30)
        assert out.split().count("closed") == 100, out  # idle reads time out (10 s)
    finally:
        httpd.shutdown()
        httpd.server_close()
