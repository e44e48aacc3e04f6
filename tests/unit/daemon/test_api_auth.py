"""The control API's gate (issue 9 items 2, 4, 5, 6, 11): rights before the body, capped bodies, TLS and
per-lease agent credentials on TCP, no schema without auth, reasons refused at the edge, the socket path
never clobbered. Real uvicorn on a real unix socket and a real TLS listener; the daemon's edges are fakes."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from burstd.api.app import create_app
from burstd.api.server import ApiServer, bind_unix_socket
from burstd.config import agent_socket_of, parse_config
from burstd.daemon.agent_auth import AgentCredentials
from burstd.daemon.client import ApiClient, ApiError, post_unix_json
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import LeaseState
from burstd.testbed.procs import free_port
from burstd.unix_http import unix_transport
from tests.fakes.tls import make_tls
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}
CAP = 64 * 1024


@pytest.fixture
def served(tmp_path):
    """A daemon API on a unix socket nobody (uid 65534) can reach as a reader, plus a TLS TCP listener."""
    with serving(tmp_path) as s:
        yield s


@contextmanager
def serving(tmp_path, extra_config: dict | None = None, api: dict | None = None, port: int | None = None):
    """``served``, with ``extra_config`` sections added to the daemon's config (``pools`` replaces the local pool;
    each pool gets a fake provider) and ``api`` settings added to its [api]."""
    run = tempfile.mkdtemp(prefix="burstd-api-")  # outside pytest's 0700 tmp dirs: nobody must traverse it
    os.chmod(run, 0o755)
    tls = make_tls(tmp_path)
    token = tmp_path / "admin.token"
    token.write_text("admin-s3cret\n")
    token.chmod(0o600)
    port = port or free_port()
    cfg = parse_config({
        "api": {"socket": f"{run}/burstd.sock", "socket_group": "nogroup", "max_body_bytes": CAP,
                "tcp_listen": f"127.0.0.1:{port}", "token_file": str(token), "tls_cert": str(tls.cert),
                "tls_key": str(tls.key), **(api or {})},
        "daemon": {"state_dir": str(tmp_path / "state")},
        "pools": [POOL],
        **(extra_config or {}),
    })
    clock = FakeClock()
    store = FakeStore(clock)
    rec = Reconciler(cfg, store, FakeAdapter(), {p.name: FakeProvider(p.name, clock) for p in cfg.pools}, first_rule,
                     clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()

    class Served:
        config, store_, reconciler, ca, tmp = cfg, store, rec, str(tls.ca), tmp_path
        url = f"https://127.0.0.1:{port}"

        def https(self, token: str | None = None) -> httpx.Client:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.Client(base_url=self.url, verify=self.ca, headers=headers, timeout=10)

    try:
        yield Served()
    finally:
        server.stop()
        os.rmdir(run) if not os.listdir(run) else None


def _as_nobody(code: str, *args: str) -> subprocess.CompletedProcess:
    """Run Python code as uid/gid 65534 (a member of the socket group, not an admin)."""
    # every module is imported first: the interpreter's own files need not be readable by nobody
    prelude = "import os, socket, sys, time\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
    return subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True, text=True, timeout=60)


RAW_POST = r'''
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(20)
s.sendall(b"POST " + sys.argv[2].encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: 80000000\r\n\r\n")
sent, t0, answer = 0, time.monotonic(), b""
try:
    while sent < 80_000_000:
        s.settimeout(0.0)
        try:
            answer += s.recv(65536)
            if answer: break
        except BlockingIOError:
            pass
        s.settimeout(20)
        s.sendall(b" " * 65536); sent += 65536
except (BrokenPipeError, ConnectionResetError):
    pass
s.settimeout(20)
while b"\r\n\r\n" not in answer:
    chunk = s.recv(65536)
    if not chunk: break
    answer += chunk
print(answer.split(b"\r\n")[0].decode(), sent, round(time.monotonic() - t0, 2))
'''


# ------------------------------------------------------------------------------ item 4: rights before the body
def test_a_reader_posting_80_mb_to_a_mutating_call_is_refused_before_the_body_is_read(served):
    out = _as_nobody(RAW_POST, served.config.api.socket, "/v1/pause")
    assert out.returncode == 0, out.stderr
    *status, sent, _took = out.stdout.split()
    assert " ".join(status).endswith("403 Forbidden"), out
    assert int(sent) < 8_000_000  # refused while the client was still uploading: the daemon never took it in
    assert served.store_.pause_state() is None or not served.store_.pause_state().paused


def test_an_admin_body_over_the_cap_is_refused_with_413_and_nothing_changes(served):
    with ApiClient(served.config.api.socket) as api:
        with pytest.raises(ApiError) as e:
            api.post("/v1/pause", json={"reason": "x" * (CAP + 10)})
        assert e.value.status == 413 and "api.max_body_bytes" in str(e.value)

    def chunks():  # no Content-Length: the gate counts the stream
        for _ in range(CAP // 1024 + 8):
            yield b" " * 1024

    with httpx.Client(transport=httpx.HTTPTransport(uds=served.config.api.socket), base_url="http://b") as c:
        assert c.post("/v1/pause", content=chunks()).status_code == 413
    assert served.store_.pause_state() is None


def test_hooks_stay_responsive_while_hostile_clients_upload_large_bodies(served):
    hostile = [threading.Thread(target=_as_nobody, args=(RAW_POST, served.config.api.socket, "/v1/budgets/x"))
               for _ in range(4)]
    for t in hostile:
        t.start()
    try:
        took = []
        for node in ("cloud1", "cloud2", "cloud3"):
            t0 = time.monotonic()
            post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": node}, timeout=2.0)
            took.append(time.monotonic() - t0)
        assert max(took) < 2.0  # inside the hooks' default timeout, with every call answered
        assert {lease.node_name for lease in served.store_.leases()} == {"cloud1", "cloud2", "cloud3"}
    finally:
        for t in hostile:
            t.join(60)


# ------------------------------------------------------------------------------ item 5: reasons at the edge
@pytest.mark.parametrize("path, body", [
    ("/v1/nodes/cloud1/drain", {"reason": "line one\nline two"}),
    ("/v1/nodes/cloud1/terminate", {"reason": "nul\x00byte"}),
    ("/v1/nodes/cloud1/drain", {"reason": "x" * 201}),
    ("/v1/pause", {"reason": "two\rlines"}),
    ("/v1/notices", {"node": "cloud1", "detail": "evil\nReason=x"}),
    ("/v1/notices", {"node": "cloud1", "deadline": 1e300}),
])
def test_a_reason_slurm_would_refuse_is_refused_at_once_and_nothing_is_queued(served, path, body):
    with ApiClient(served.config.api.socket) as api:
        with pytest.raises(ApiError) as e:
            api.post(path, json=body)
    assert e.value.status == 422
    assert served.store_.intents() == [] and served.store_.pause_state() is None


def test_a_one_line_reason_is_carried_out_as_given(served):
    with ApiClient(served.config.api.socket) as api:
        api.post("/v1/nodes/cloud1/drain", json={"reason": "disk errors; see ticket #12"})
    [intent] = served.store_.intents()
    assert (intent.kind, intent.node, intent.reason) == ("drain", "cloud1", "disk errors; see ticket #12")


# ------------------------------------------------------------------------------ item 11: bounded queries
@pytest.mark.parametrize("path", ["/v1/events?limit=1e20", "/v1/events?limit=-1", "/v1/explain/-5",
                                  "/v1/explain/1000000000000000000000000", "/v1/spend?since=nan"])
def test_out_of_range_query_values_are_422_not_500(served, path):
    with httpx.Client(transport=httpx.HTTPTransport(uds=served.config.api.socket), base_url="http://b") as c:
        assert c.get(path).status_code == 422


@pytest.mark.parametrize("path", ["/v1/spend?by=lease", "/v1/spend/series?by=lease"])
def test_both_spend_routes_refuse_a_grouping_readers_are_not_offered_with_the_same_message(served, path):
    with httpx.Client(transport=httpx.HTTPTransport(uds=served.config.api.socket), base_url="http://b") as c:
        r = c.get(path)
    assert r.status_code == 422
    assert r.json()["detail"] == "by must be account, user, job, pool or kind, not 'lease'"


@pytest.mark.parametrize("job_id", [-1, 0, 10**24])
def test_resume_file_job_ids_outside_slurms_range_are_refused(served, job_id):
    with pytest.raises(ApiError) as e:
        post_unix_json(served.config.api.socket, "/v1/hooks/resume",
                       {"hostlist": "cloud1", "jobs": [{"job_id": job_id, "nodes": "cloud1"}]})
    assert e.value.status == 422 and served.store_.leases() == []


# ------------------------------------------------------------------------------ item 2: TLS, tokens, agents
def test_tcp_speaks_tls_only_and_needs_a_token_even_for_the_schema(served):
    with pytest.raises(httpx.HTTPError):
        httpx.get(served.url.replace("https", "http") + "/v1/status", timeout=5)
    with served.https() as anon:
        for path in ("/v1/status", "/openapi.json", "/docs", "/redoc"):
            assert anon.get(path).status_code == 401, path
        assert anon.get("/healthz").status_code == 200
    with served.https("wrong") as bad:
        assert bad.post("/v1/pause").status_code == 401
    with served.https("admin-s3cret") as admin:
        assert "/v1/notices" in admin.get("/openapi.json").json()["paths"]
        assert admin.post("/v1/pause").status_code == 200 and served.store_.pause_state().paused


def test_an_agent_token_reports_for_its_own_node_only_and_dies_with_its_lease(served):
    post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud2"})
    with ApiClient(served.config.api.socket) as api:
        token = api.post("/v1/nodes/cloud2/agent-token")["token"]
        with pytest.raises(ApiError) as e:
            api.post("/v1/nodes/cloud3/agent-token")  # no open lease: nothing to give
        assert e.value.status == 404
    with served.https(token) as agent:
        assert agent.post("/v1/notices", json={"node": "cloud2", "kind": "spot-interruption"}).status_code == 202
        assert agent.post("/v1/notices", json={"node": "cloud3"}).status_code == 403
        for method, path in (("POST", "/v1/pause"), ("POST", "/v1/nodes/cloud3/terminate"),
                             ("PUT", "/v1/budgets/chem"), ("GET", "/v1/status"), ("GET", "/openapi.json"),
                             ("POST", "/v1/hooks/resume")):
            assert agent.request(method, path, json={"usd": 0, "hostlist": "cloud3"}).status_code == 403, path
        forged = token[:-1] + ("0" if token[-1] != "0" else "1")
        with served.https(forged) as other:
            assert other.post("/v1/notices", json={"node": "cloud2"}).status_code == 401
        [lease] = served.store_.leases()
        served.store_.transition(lease.lease_id, LeaseState.REFUSED, reason="test: lease over")
        assert agent.post("/v1/notices", json={"node": "cloud2"}).status_code == 401  # revoked with the lease
    assert [i.node for i in served.store_.intents() if i.kind == "notice"] == ["cloud2"]
    assert served.store_.pause_state() is None


def _leased_token(served, node: str, folder=None):
    """A lease for ``node`` (a resume hook) and its agent token; with ``folder``, also in a 0600 file there."""
    post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": node})
    with ApiClient(served.config.api.socket) as api:
        token = api.post(f"/v1/nodes/{node}/agent-token")["token"]
    if folder is None:
        return token, None
    tok = folder / "agent.token"
    tok.write_text(token + "\n")
    tok.chmod(0o600)
    return token, tok


def test_on_the_nodes_socket_root_is_nobody_and_a_nodes_token_speaks_for_its_own_node_only(served):
    """The socket the local provider relays into each image VM: the relay is root on the head, which the control
    socket takes for an admin. Here the peer counts for nothing; the node's agent token is the only credential."""
    nodes_socket = agent_socket_of(served.config.api.socket)
    assert stat.S_IMODE(os.stat(nodes_socket).st_mode) == 0o660
    post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud1,cloud2"})
    with ApiClient(served.config.api.socket) as api:
        token = api.post("/v1/nodes/cloud2/agent-token")["token"]

    def client(bearer: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        return httpx.Client(transport=unix_transport(nodes_socket), base_url="http://burstd", headers=headers,
                            timeout=10)

    with client() as root:  # this test runs as root: an admin on the control socket
        for method, path in (("POST", "/v1/pause"), ("PUT", "/v1/budgets/chem"), ("GET", "/v1/status"),
                             ("GET", "/v1/leases"), ("POST", "/v1/hooks/resume"), ("POST", "/v1/notices")):
            assert root.request(method, path, json={"usd": 0, "hostlist": "cloud3", "node": "cloud1"}
                                ).status_code == 401, path
        assert root.get("/healthz").status_code == 200
    with client("admin-s3cret") as admin:  # the admin token is what it is on TLS
        assert admin.get("/v1/status").status_code == 200
    with client(token) as agent:
        assert agent.post("/v1/notices", json={"node": "cloud2", "kind": "spot-interruption"}).status_code == 202
        assert agent.post("/v1/notices", json={"node": "cloud1"}).status_code == 403
        assert agent.post("/v1/pause").status_code == 403
        # the dead-man switch's question, for its own node only
        [own] = agent.get("/v1/leases", params={"node": "cloud2"}).json()
        assert own["node_name"] == "cloud2"
        assert agent.get("/v1/leases", params={"node": "cloud1"}).status_code == 403
        assert agent.get("/v1/leases").status_code == 403  # not the fleet's
    assert served.store_.pause_state() is None
    assert [i.node for i in served.store_.intents() if i.kind == "notice"] == ["cloud2"]


def test_the_dead_man_switch_with_a_nodes_token_tells_an_open_lease_from_one_that_is_over(served, tmp_path):
    from burstd.agent.deadman import Probe, probe_daemons

    token, tok = _leased_token(served, "cloud2", tmp_path)
    probe = probe_daemons([f"unix:{agent_socket_of(served.config.api.socket)}"], "cloud2", str(tok))
    assert probe() == Probe.LEASE_OPEN
    [lease] = served.store_.leases()
    served.store_.transition(lease.lease_id, LeaseState.REFUSED, reason="test: lease over")
    # the token died with its lease: it learns that the lease is over (the switch powers off), and nothing else
    assert probe() == Probe.LEASE_OVER
    with httpx.Client(transport=unix_transport(agent_socket_of(served.config.api.socket)), base_url="http://b",
                      headers={"Authorization": f"Bearer {token}"}, timeout=10) as ended:
        assert ended.post("/v1/notices", json={"node": "cloud2"}).status_code == 401
        assert ended.get("/v1/leases", params={"node": "cloud1"}).status_code == 403
    # a new lease of the same node is another token's: the old one still reads its own lease as over
    post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud2"})
    assert probe() == Probe.LEASE_OVER


def test_agent_tokens_cannot_be_minted_for_another_node_or_lease(tmp_path):
    creds = AgentCredentials.load(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "agent.key").st_mode) == 0o600
    from burstd.domain.lease import Lease

    lease = Lease("abc123", "local", "cloud2", LeaseState.READY)
    token = creds.token_for(lease)
    assert creds.verify(token) == ("abc123", "cloud2")
    assert creds.verify(token.replace("cloud2", "cloud3")) is None
    assert creds.verify(token.replace("abc123", "abc124")) is None
    assert AgentCredentials.load(tmp_path).verify(token) == ("abc123", "cloud2")  # the same key after restart
    assert AgentCredentials(os.urandom(32)).verify(token) is None


def test_the_listener_refuses_a_world_readable_token_file(tmp_path):
    tls = make_tls(tmp_path)
    token = tmp_path / "admin.token"
    token.write_text("t\n")
    token.chmod(0o644)
    cfg = parse_config({"api": {"socket": str(tmp_path / "b.sock"), "tcp_listen": f"127.0.0.1:{free_port()}",
                                "token_file": str(token), "tls_cert": str(tls.cert), "tls_key": str(tls.key)},
                        "pools": [POOL]})
    clock = FakeClock()
    rec = Reconciler(cfg, FakeStore(clock), FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule,
                     clock=clock)
    with pytest.raises(ValueError, match="api.token_file: .* open to group or other users"):
        ApiServer(create_app(rec, cfg), cfg).start()
    assert not (tmp_path / "b.sock").exists()  # refused before anything was bound


# ------------------------------------------------------------------------------ item 6: the socket path
def test_the_socket_path_never_removes_a_file_or_directory(tmp_path):
    victim = tmp_path / "burstd.toml"
    victim.write_text("precious")
    with pytest.raises(ValueError, match="api.socket: .* is not a socket"):
        bind_unix_socket(str(victim), "root")
    assert victim.read_text() == "precious"
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="is not a socket"):
        bind_unix_socket(str(tmp_path / "d"), "root")
    assert (tmp_path / "d").is_dir()


def test_a_stale_socket_is_replaced_but_a_live_one_is_refused(tmp_path):
    path = str(tmp_path / "s.sock")
    live = bind_unix_socket(path, "root")
    try:
        with pytest.raises(ValueError, match="in use by a running daemon"):
            bind_unix_socket(path, "root")
    finally:
        live.close()  # the file stays: stale now
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    bind_unix_socket(path, "root").close()


def test_the_agent_reports_over_tls_with_its_own_credential_and_refuses_unsafe_settings(served, tmp_path):
    from burstd.agent.report import report_notice
    from burstd.domain.preemption import Notice

    _, tok = _leased_token(served, "cloud1", tmp_path)
    notice = Notice("interruption", "terminate", 1_800_000_000.0, "aws")
    assert report_notice(served.url, "cloud1", notice, token_file=str(tok), ca_file=served.ca)
    assert [i.node for i in served.store_.intents() if i.kind == "notice"] == ["cloud1"]
    assert not report_notice(served.url.replace("https", "http"), "cloud1", notice, token_file=str(tok))
    tok.chmod(0o644)
    assert not report_notice(served.url, "cloud1", notice, token_file=str(tok), ca_file=served.ca)
    assert len(served.store_.intents()) == 1


@pytest.mark.parametrize("t0", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_a_hook_start_time_that_is_not_a_real_time_never_reaches_the_metrics(served, t0):
    raw = '{"hostlist": "cloud1", "t0": %s}' % t0  # Python's json reads NaN/Infinity: the model must refuse them
    with httpx.Client(transport=httpx.HTTPTransport(uds=served.config.api.socket), base_url="http://b") as c:
        r = c.post("/v1/hooks/resume", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422
        metrics = c.get("/metrics").text
    # burstd_burn_rate_cap_usd_per_hour is +Inf by design when no cap is set (so `burn > cap` never fires)
    values = [line.split()[-1] for line in metrics.splitlines()
              if not line.startswith(("#", "burstd_burn_rate_cap_usd_per_hour "))]
    bad = [v for v in values if v in ("NaN", "+Inf", "-Inf")]
    assert served.store_.leases() == [] and bad == []


def test_an_agent_learns_its_pools_observed_preemption_rate_for_its_own_node_only(served):
    store, now = served.store_, served.reconciler.clock()
    old = store.create_lease(pool="local", node_name="cloud1", at=now - 7200)
    for state in (LeaseState.LAUNCHING, LeaseState.BOOTING):
        store.transition(old.lease_id, state)
    store.transition(old.lease_id, LeaseState.READY, ready_at=now - 7200)
    store.transition(old.lease_id, LeaseState.FAILED, "preempted: the provider reclaimed the instance",
                     ended_at=now - 3600)
    store.transition(old.lease_id, LeaseState.TERMINATED, "preempted (notice deadline passed)")
    post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud2"})
    with ApiClient(served.config.api.socket) as api:
        token = api.post("/v1/nodes/cloud2/agent-token")["token"]
    lease = store.lease_for_node("cloud2")
    store._leases[lease.lease_id] = dataclasses.replace(lease, state=LeaseState.READY, ready_at=now - 3600)
    with served.https(token) as agent:
        r = agent.get("/v1/preempt-rate/cloud2")
        assert r.status_code == 200, r.text
        assert r.json() == {"pool": "local", "preemptions": 1, "node_hours": 2.0, "rate_per_node_hour": 0.5}
        assert agent.get("/v1/preempt-rate/cloud1").status_code == 403  # another node's
    with served.https("admin-s3cret") as admin:
        assert admin.get("/v1/preempt-rate/cloud3").status_code == 404  # no open lease: no pool
    # the node's agent keeps it in a file over TLS with its own credential; the TaskProlog exports it
    from burstd.agent.preempt_rate import refresh, task_prolog_lines

    tok = served.tmp / "agent.token"
    tok.write_text(token + "\n")
    tok.chmod(0o600)
    rate_file = served.tmp / "run" / "preempt-rate"
    assert refresh(served.url, "cloud2", str(rate_file), token_file=str(tok), ca_file=served.ca)
    assert rate_file.read_text() == "0.5\n" and stat.S_IMODE(rate_file.stat().st_mode) == 0o644
    assert task_prolog_lines({}, str(rate_file)) == ["export BURSTD_PREEMPT_RATE_PER_HOUR=0.5"]
    assert not refresh(served.url, "cloud1", str(rate_file), token_file=str(tok), ca_file=served.ca)  # 403
    assert rate_file.read_text() == "0.5\n"  # kept as it was

    # the running agent does it by itself, in a thread of its own, with no notice to watch (metadata unreachable)
    from burstd.agent.main import run
    from burstd.config import AgentConfig, SlurmConfig

    own_file = served.tmp / "agent-run" / "preempt-rate"
    agent_cfg = AgentConfig(provider="local", metadata_url="http://127.0.0.1:9", node_name="cloud2",
                            daemon_url=served.url, daemon_token_file=str(tok), daemon_ca_file=served.ca,
                            preempt_rate_file=str(own_file), deadman_s=0, http_retries=0, http_timeout_s=0.5)
    stop = threading.Event()
    loop = threading.Thread(target=run, args=(agent_cfg, SlurmConfig()), kwargs={"stop": stop}, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 20
        while not own_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert own_file.read_text() == "0.5\n"
    finally:
        stop.set()
        loop.join(10)
