"""The rest backend against recorded slurmrestd replies (22.05 v0.0.38, 24.11 v0.0.42, 26.05 v0.0.45),
served by an httpx MockTransport: version negotiation, JWT headers, paths, bodies, errors.
The live slurmrestd is exercised in tests/integration/test_slurm_adapter.py."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import httpx
import pytest

from burstd.config import SlurmConfig
from burstd.slurm import parse
from burstd.slurm.base import SlurmError
from burstd.slurm.rest import RestAdapter
from tests.conftest import FIXTURES

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05"

SITES = {
    # version -> (openapi spec, {endpoint: file})
    "v0.0.38": (DATA / "rest_openapi_v3_paths.json",
                {"jobs": DATA / "rest_v0.0.38_jobs.json", "nodes": DATA / "rest_v0.0.38_nodes.json",
                 "partitions": DATA / "rest_v0.0.38_partitions.json"}),
    "v0.0.42": (FIXTURES / "24.11/rest/openapi_v3.json",
                {"jobs": FIXTURES / "24.11/rest/v0.0.42_jobs.json", "nodes": FIXTURES / "24.11/rest/v0.0.42_nodes.json",
                 "partitions": FIXTURES / "24.11/rest/v0.0.42_partitions.json",
                 "job/8": FIXTURES / "24.11/rest/v0.0.42_job_8.json"}),
    "v0.0.45": (FIXTURES / "26.05/rest/openapi_v3.json",
                {"jobs": FIXTURES / "26.05/rest/v0.0.45_jobs.json", "nodes": FIXTURES / "26.05/rest/v0.0.45_nodes.json",
                 "partitions": FIXTURES / "26.05/rest/v0.0.45_partitions.json",
                 "job/8": FIXTURES / "26.05/rest/v0.0.45_job_8.json"}),
}
OK = {"meta": {}, "errors": [], "warnings": []}


class Server:
    def __init__(self, version: str, token: str = "tok-1"):
        self.version, self.token = version, token
        self.spec, self.files = SITES[version]
        self.requests: list[httpx.Request] = []
        self.status = 200

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("X-SLURM-USER-TOKEN") != self.token:
            return httpx.Response(401, text="Authentication failure")
        path = request.url.path
        if path == "/openapi/v3":
            return httpx.Response(200, content=self.spec.read_bytes())
        prefix = f"/slurm/{self.version}/"
        if not path.startswith(prefix):
            return httpx.Response(404, json={"errors": [{"description": f"no path {path}"}]})
        name = path[len(prefix):].rstrip("/")
        if request.method == "GET" and name in self.files:
            return httpx.Response(200, content=self.files[name].read_bytes())
        if self.status != 200:
            return httpx.Response(self.status, json={"errors": [{"description": "Job is not pending", "error_number": 2017}]})
        return httpx.Response(200, json=OK)


@pytest.fixture
def token_file(tmp_path):
    p = tmp_path / "jwt"
    p.write_text("SLURM_JWT=tok-1\n")
    return str(p)


def make(version: str, token_file: str, **cfg) -> tuple[RestAdapter, Server]:
    server = Server(version)
    config = SlurmConfig(backend="rest", rest_url="http://slurmrestd.test:6820", rest_token_file=token_file, **cfg)
    client = httpx.Client(transport=httpx.MockTransport(server), base_url=config.rest_url)
    return RestAdapter(config, client=client), server


@pytest.mark.parametrize("version", list(SITES))
def test_snapshot_negotiates_the_newest_version_and_costs_three_requests(version, token_file):
    rest, server = make(version, token_file)
    snap = rest.snapshot()
    assert rest.version == version
    paths = [r.url.path for r in server.requests]
    assert paths[0] == "/openapi/v3" and len(paths) == 4
    old = version == "v0.0.38"
    assert paths[1:] == [f"/slurm/{version}/{e}" + ("" if old else "/") for e in ("jobs", "nodes", "partitions")]
    for r in server.requests:
        assert r.headers["X-SLURM-USER-NAME"] == "root" and r.headers["X-SLURM-USER-TOKEN"] == "tok-1"
    assert snap.source == "rest" and all(j.is_active for j in snap.jobs)
    expected = {"onprem", "cloud"}
    assert {p.name for p in snap.partitions} == expected
    jobs_doc = parse.load_json(SITES[version][1]["jobs"].read_bytes(), "jobs")
    assert snap.jobs == tuple(sorted((j for j in parse.jobs_from_doc(jobs_doc) if j.is_active), key=lambda j: j.job_id))


def test_configured_version_skips_negotiation(token_file):
    rest, server = make("v0.0.42", token_file, rest_version="v0.0.42")
    rest.snapshot()
    assert "/openapi/v3" not in [r.url.path for r in server.requests]


def test_unknown_configured_version_is_refused(token_file):
    with pytest.raises(ValueError, match="rest_version"):
        RestAdapter(SlurmConfig(backend="rest", rest_version="v0.0.99", rest_token_file=token_file))


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.42", "v0.0.45"])
def test_partition_update_body(version, token_file):
    rest, server = make(version, token_file, rest_version=version)
    rest.set_partitions(8, ["onprem", "cloud"])
    req = server.requests[-1]
    assert req.method == "POST" and req.url.path == f"/slurm/{version}/job/8"
    assert json.loads(req.content) == {"partition": "onprem,cloud"}


def test_add_partition_reads_the_job_first(token_file):
    rest, server = make("v0.0.45", token_file, rest_version="v0.0.45")
    rest.add_partition(8, "onprem")
    get, post = server.requests[-2:]
    assert get.method == "GET" and get.url.path == "/slurm/v0.0.45/job/8"
    assert json.loads(post.content) == {"partition": "cloud,onprem"}


@pytest.mark.parametrize(
    "action,method,path,body,params",
    [
        (lambda a: a.drain(["c1"], "maintenance window"), "POST", "/slurm/v0.0.45/node/c1",
         {"state": ["DRAIN"], "reason": "maintenance window"}, {}),
        (lambda a: a.resume(["c[1-2]"]), "POST", "/slurm/v0.0.45/node/c%5B1-2%5D", {"state": ["RESUME"]}, {}),
        (lambda a: a.clear_reason(["c1"]), "POST", "/slurm/v0.0.45/node/c1", {"reason": ""}, {}),
        (lambda a: a.power_down(["c1"], force=True), "POST", "/slurm/v0.0.45/node/c1",
         {"state": ["POWER_DOWN_FORCE"]}, {}),
        (lambda a: a.power_up(["c3"]), "POST", "/slurm/v0.0.45/node/c3", {"state": ["POWER_UP"]}, {}),
        (lambda a: a.set_node_address("c1", "10.0.0.5", "vm1"), "POST", "/slurm/v0.0.45/node/c1",
         {"address": ["10.0.0.5"], "hostname": ["vm1"]}, {}),
        # v0.0.45 (26.05) serves requeue as a GET (tests/data/slurm-fixtures/26.05/rest/openapi_v3.json)
        (lambda a: a.requeue(8), "GET", "/slurm/v0.0.45/job/8/requeue", None, {}),
        (lambda a: a.signal(8, "USR1", batch=True), "DELETE", "/slurm/v0.0.45/job/8", None,
         {"signal": "USR1", "flags": "BATCH_JOB"}),
    ],
)
def test_v0045_actions(token_file, action, method, path, body, params):
    rest, server = make("v0.0.45", token_file, rest_version="v0.0.45")
    action(rest)
    req = server.requests[-1]
    assert (req.method, req.url.raw_path.decode().split("?")[0]) == (method, path)
    if body is not None:
        assert json.loads(req.content) == body
    assert dict(req.url.params) == params


@pytest.mark.parametrize(
    "version,action",
    [("v0.0.38", lambda a: a.drain(["c1"], "x")), ("v0.0.38", lambda a: a.power_up(["c1"])),
     ("v0.0.38", lambda a: a.signal(5, "USR1", batch=True)), ("v0.0.42", lambda a: a.requeue(5)),
     ("v0.0.38", lambda a: a.requeue(5))],
)
def test_actions_the_version_lacks_raise_a_clear_error(version, action, token_file):
    rest, server = make(version, token_file, rest_version=version)
    with pytest.raises(SlurmError, match=f"slurmrestd {version} has no endpoint"):
        action(rest)
    assert server.requests == []


def test_slurm_errors_in_replies_become_slurm_errors(token_file):
    rest, server = make("v0.0.45", token_file, rest_version="v0.0.45")
    server.status = 500
    with pytest.raises(SlurmError, match="Job is not pending"):
        rest.set_partitions(8, ["cloud"])


def test_bad_token_is_a_clear_401(tmp_path):
    bad = tmp_path / "jwt"
    bad.write_text("wrong")
    rest, _ = make("v0.0.45", str(bad), rest_version="v0.0.45")
    with pytest.raises(SlurmError, match="401"):
        rest.snapshot()


def test_missing_token_file_names_the_setting(tmp_path):
    rest, _ = make("v0.0.45", str(tmp_path / "absent"), rest_version="v0.0.45")
    with pytest.raises(SlurmError, match="rest_token_file"):
        rest.snapshot()


def fake_scontrol(tmp_path, body: str):
    """A bin dir holding an executable ``scontrol``: this Python ``body`` run by the test's interpreter."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "scontrol"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir


def test_token_from_scontrol_is_renewed_once_on_401(tmp_path):
    counter = tmp_path / "n"
    bindir = fake_scontrol(tmp_path, f"import pathlib\np = pathlib.Path({str(counter)!r})\n"
                                     "n = int(p.read_text()) + 1 if p.exists() else 1\np.write_text(str(n))\n"
                                     "print(f'SLURM_JWT=tok-{n}')\n")
    server = Server("v0.0.45", token="tok-2")  # the first token is already stale
    config = SlurmConfig(backend="rest", rest_url="http://x", rest_version="v0.0.45", bin_dir=str(bindir))
    rest = RestAdapter(config, client=httpx.Client(transport=httpx.MockTransport(server), base_url="http://x"))
    rest.snapshot()
    assert counter.read_text() == "2"
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in server.requests[:2]] == ["tok-1", "tok-2"]


def test_unreachable_server_is_a_slurm_error(token_file):
    rest = RestAdapter(SlurmConfig(backend="rest", rest_url="http://127.0.0.1:9", rest_version="v0.0.38",
                                   rest_token_file=token_file, command_timeout_s=2))
    with pytest.raises(SlurmError, match="cannot reach slurmrestd"):
        rest.snapshot()


def test_unix_socket_url_without_token(tmp_path):
    """``rest_url = "unix:/path"``: requests go over the socket; with rest_auth/local no JWT is sent."""
    import http.server
    import socketserver
    import threading

    seen: list[dict] = []
    body = (DATA / "rest_v0.0.38_partitions.json").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append({"path": self.path, "token": self.headers.get("X-SLURM-USER-TOKEN")})
            data = body if self.path.endswith("/partitions") else b'{"meta":{},"errors":[],"jobs":[],"nodes":[]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

        def get_request(self):
            conn, _ = super().get_request()
            return conn, ("local", 0)

    sock = tmp_path / "rest.sock"
    server = Server(str(sock), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rest = RestAdapter(SlurmConfig(backend="rest", rest_url=f"unix:{sock}", rest_version="v0.0.38"))
        snap = rest.snapshot()
        assert {p.name for p in snap.partitions} == {"onprem", "cloud"}
        assert [s["path"] for s in seen] == ["/slurm/v0.0.38/jobs", "/slurm/v0.0.38/nodes", "/slurm/v0.0.38/partitions"]
        assert all(s["token"] is None for s in seen)
        rest.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("version", list(SITES))
def test_a_held_job_named_with_invalid_utf8_does_not_hide_the_queue(version, token_file, tmp_path):
    """Issue 21 item 4: slurmrestd passes a job name through byte for byte. A held job named ``held\\xff\\xfe``
    used to make the whole job list undecodable, and with it every snapshot; now the bad bytes read as U+FFFD
    and every other job is as before."""
    rest, server = make(version, token_file)
    raw = SITES[version][1]["jobs"].read_bytes()
    assert raw.count(b'"held_user"') == 1
    bad = tmp_path / "jobs.json"
    bad.write_bytes(raw.replace(b'"held_user"', b'"held\xff\xfe_user"'))
    server.files = {**server.files, "jobs": bad}
    snap = rest.snapshot()
    held = [j for j in snap.jobs if j.name == "held\ufffd\ufffd_user"]
    assert len(held) == 1 and held[0].state == "PENDING"
    before = parse.jobs_from_doc(parse.load_json(raw, "jobs"))
    assert {j.job_id for j in snap.jobs} == {j.job_id for j in before if j.is_active}
    json.dumps([j.name for j in snap.jobs], ensure_ascii=False).encode()  # no surrogate: stores and prints


def test_the_rest_backend_runs_the_cloud_gate_through_scontrol_with_checked_arguments(tmp_path):
    """slurmrestd has no call for a partition's account lists, reservations or a hold with its reason: the rest
    backend makes them with the head's scontrol, as the cli backend does (issue 21), so the gate holds there too."""
    from burstd.daemon.cloud_gate import GateSlurm
    from burstd.domain.partition_access import PartitionAccess

    calls = tmp_path / "calls"
    bindir = fake_scontrol(tmp_path, f"import sys\nopen({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                                     "if sys.argv[1:3] == ['show', 'partition']:\n"
                                     "    print('PartitionName=cloud AllowAccounts=ALL DenyAccounts=broke "
                                     "Nodes=cloud[1-4]')\n")
    config = SlurmConfig(backend="rest", rest_url="http://x", rest_version="v0.0.45", bin_dir=str(bindir))
    rest = RestAdapter(config, client=httpx.Client(transport=httpx.MockTransport(Server("v0.0.45")),
                                                   base_url="http://x"))
    assert isinstance(rest, GateSlurm)  # the daemon's gate engages on this backend
    assert rest.partition_access("cloud") == PartitionAccess(allow=None, deny=("broke",))
    rest.set_partition_access("cloud", PartitionAccess(allow=None, deny=("broke", "chem")))
    rest.hold_with_reason(42, "burstd: account chem has no money left\nPartition=cloud")  # one line kept
    with pytest.raises(ValueError):  # a job id is checked before anything runs
        rest.hold_with_reason(-1, "x")
    lines = calls.read_text().splitlines()
    assert lines[0] == "show partition cloud -o"
    assert any(line.startswith("update PartitionName=cloud") and "DenyAccounts=broke,chem" in line for line in lines)
    assert "hold 42" in lines and len(lines) == 4, lines  # show, update, hold, admincomment: nothing for -1
    assert lines[3].startswith("update jobid=42 admincomment=burstd: account chem has no money left")


def test_a_job_started_again_begins_past_its_requeues_second(token_file):
    """slurmd refuses a credential of a requeued job created in the requeue's second or before: the begin time
    burstd sets is REQUEUE_START_GAP_S ahead, never now (an expedited requeue and start_now alike)."""
    import time

    from burstd.slurm.base import REQUEUE_START_GAP_S

    rest, server = make("v0.0.45", token_file, rest_version="v0.0.45")
    before = int(time.time())
    rest.requeue(8, expedite=True)
    rest.start_now(9)
    after = int(time.time())
    begins = [json.loads(r.content)["begin_time"]["number"] for r in server.requests if r.method == "POST"]
    assert len(begins) == 2
    assert all(before + REQUEUE_START_GAP_S <= b <= after + REQUEUE_START_GAP_S for b in begins), begins
