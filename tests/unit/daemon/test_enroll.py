"""A new AWS or GCP node gets its agent token by proving which instance it is (``POST /v1/enroll``): the daemon's
real TLS listener and real uvicorn, real signatures (``tests.fakes.instance_identity``), and ``burstd-agent
--enroll`` reading its proof from a metadata server over HTTP, as on a cloud node."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from burstd.agent.enroll import enroll
from burstd.config import AgentConfig
from burstd.domain.lease import LeaseState
from burstd.testbed.procs import free_port
from tests.fakes.instance_identity import AwsIdentity, GoogleIdentity
from tests.unit.daemon.test_api_auth import serving

TYPES = [{"name": "m5.large", "cpus": 2, "memory_mb": 8000}]
S = LeaseState


class Quiet(BaseHTTPRequestHandler):
    """A test server's handler: ``answer`` a status and body, and no access log."""

    def answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def certs_server(google: GoogleIdentity):
    """Google's certs endpoint (oauth2/v1/certs) over HTTP."""

    class Handler(Quiet):
        def do_GET(self):
            self.answer(200, json.dumps(google.certs).encode())

    with _serve(Handler) as url:
        yield url + "/oauth2/v1/certs"


@contextmanager
def _serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def daemon(tmp_path, aws, google):
    cert = tmp_path / "aws-us-east-1.pem"
    cert.write_bytes(aws.cert_pem)
    with certs_server(google) as certs_url:
        pools = [
            {"name": "aws-spot", "provider": "aws", "partition": "cloud", "node_prefix": "aws", "node_count": 4,
             "instance_types": TYPES, "price_per_hour": 0.1,
             "aws": {"region": "us-east-1", "subnets": ["subnet-1"], "launch_template": "lt",
                     "identity_certificate": str(cert)}},
            {"name": "gcp-spot", "provider": "gcp", "partition": "gcloud", "node_prefix": "gcp", "node_count": 4,
             "instance_types": TYPES, "price_per_hour": 0.1,
             "gcp": {"project": "proj", "region": "europe-west4", "zones": ["europe-west4-a"],
                     "identity_certs_url": certs_url}},
        ]
        port = free_port()  # the URL the nodes use is the one the daemon expects in a GCP token
        with serving(tmp_path, {"pools": pools}, api={"node_url": f"https://127.0.0.1:{port}"}, port=port) as s:
            yield s


def _booting(served, pool: str, node: str, instance: str, state: LeaseState = S.BOOTING):
    store = served.store_
    lease = store.create_lease(pool=pool, node_name=node)
    store.transition(lease.lease_id, S.LAUNCHING)
    lease = store.transition(lease.lease_id, S.BOOTING, instance_id=instance)
    if state != S.BOOTING:
        lease = store.transition(lease.lease_id, state)
    return lease


def test_an_aws_node_with_a_signed_identity_gets_its_leases_token_which_works_until_it_registers(daemon, aws):
    lease = _booting(daemon, "aws-spot", "aws2", "i-0abc")
    with daemon.https() as anyone:  # no token: the proof is the credential
        r = anyone.post("/v1/enroll", json=aws.proof("i-0abc"))
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["node"] == "aws2" and answer["lease"] == lease.lease_id
        forged = aws.proof("i-0abc")
        forged["document"] = forged["document"].replace("123456789012", "999999999999")
        assert anyone.post("/v1/enroll", json=forged).status_code == 401
        assert anyone.post("/v1/enroll", json=AwsIdentity().proof("i-0abc")).status_code == 401  # not AWS's key
        assert anyone.post("/v1/enroll", json=aws.proof("i-0abc", region="us-west-2")).status_code == 403
        assert anyone.post("/v1/enroll", json=aws.proof("i-0new")).status_code == 404  # not (yet) recorded
    with daemon.https(answer["token"]) as node:  # the token speaks for its own node
        assert node.post("/v1/notices", json={"node": "aws2", "kind": "spot-interruption"}).status_code == 202
        assert node.post("/v1/notices", json={"node": "aws3"}).status_code == 403
        assert node.get("/v1/status").status_code == 403
    daemon.store_.transition(lease.lease_id, S.READY)
    with daemon.https() as anyone:  # slurmd registered: a job may have run there, the proof counts no more
        r = anyone.post("/v1/enroll", json=aws.proof("i-0abc"))
        assert r.status_code == 403 and "before its slurmd registers" in r.json()["detail"]


def test_a_gcp_node_enrols_with_a_google_token_for_this_daemons_url_only(daemon, google):
    _booting(daemon, "gcp-spot", "gcp1", "europe-west4-a/burstd-gcp1-x")
    with daemon.https() as anyone:
        other = google.proof("burstd-gcp1-x", "europe-west4-a", "proj", "https://elsewhere.example.org")
        assert anyone.post("/v1/enroll", json=other).status_code == 401  # a token meant for another service
        mine = google.proof("burstd-gcp1-x", "europe-west4-a", "proj", daemon.url)
        r = anyone.post("/v1/enroll", json=mine)
        assert r.status_code == 200 and r.json()["node"] == "gcp1", r.text
        wrong = google.proof("burstd-gcp1-x", "europe-west4-a", "proj2", daemon.url)
        assert anyone.post("/v1/enroll", json=wrong).status_code == 403


def test_enrolment_is_off_for_a_cloud_without_its_trust_anchor(tmp_path, google):
    pools = [{"name": "gcp-spot", "provider": "gcp", "partition": "gcloud", "node_prefix": "gcp", "node_count": 2,
              "instance_types": TYPES, "price_per_hour": 0.1,
              "gcp": {"project": "proj", "region": "europe-west4", "zones": ["europe-west4-a"]}}]
    with serving(tmp_path, {"pools": pools}) as served, served.https() as anyone:
        r = anyone.post("/v1/enroll", json=google.proof("n", "europe-west4-a", "proj", "https://x"))
        assert r.status_code == 403 and "node_url is not set" in r.json()["detail"]
        r = anyone.post("/v1/enroll", json=AwsIdentity().proof("i-1"))
        assert r.status_code == 403 and "identity_certificate" in r.json()["detail"]
        assert anyone.post("/v1/enroll", json={"cloud": "aws", "document": "x" * 9000}).status_code == 422


# ------------------------------------------------------------------------------ the node's side: burstd-agent
@contextmanager
def imds(proof: dict[str, str]):
    """AWS IMDSv2 (a session token first, then the identity), as a node's agent reads it."""
    seen: list[str] = []

    class Handler(Quiet):
        def do_PUT(self):
            self.answer(200, b"imds-token" if self.path == "/latest/api/token" else b"")

        def do_GET(self):
            seen.append(self.path)
            if self.headers.get("X-aws-ec2-metadata-token") != "imds-token":
                return self.answer(401, b"")
            key = self.path.rsplit("/", 1)[-1]
            found = self.path.startswith("/latest/dynamic/instance-identity/") and key in proof
            self.answer(200 if found else 404, proof.get(key, "").encode() if found else b"")

    with _serve(Handler) as url:
        yield url, seen


def _agent(daemon, url: str, token_file, provider: str = "aws") -> AgentConfig:
    return AgentConfig(provider=provider, metadata_url=url, daemon_url=daemon.url, daemon_ca_file=daemon.ca,
                       daemon_token_file=str(token_file))


def test_the_agent_enrols_once_and_keeps_its_token_private(daemon, aws, tmp_path):
    _booting(daemon, "aws-spot", "aws1", "i-0node")
    token_file = tmp_path / "etc-burstd" / "agent.token"
    with imds(aws.proof("i-0node")) as (url, seen):
        assert enroll(_agent(daemon, url, token_file), "aws1", wait_s=5) == 0
        token = token_file.read_text().strip()
        assert token.startswith("burstd-agent.v1.") and ".aws1." in token
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600 and os.stat(token_file).st_uid == os.getuid()
        assert "/latest/dynamic/instance-identity/signature" in seen
        asked = len(seen)
        assert enroll(_agent(daemon, url, token_file), "aws1", wait_s=5) == 0  # in place: nothing asked again
        assert len(seen) == asked and token_file.read_text().strip() == token
    with daemon.https(token) as node:
        assert node.get("/v1/leases", params={"node": "aws1"}).status_code == 200


def test_the_agent_waits_for_a_gang_members_record_and_refuses_a_token_for_another_node(daemon, aws, tmp_path):
    naps: list[float] = []
    token_file = tmp_path / "agent.token"

    def nap(s):  # the daemon records the gang member's instance id while the node waits
        naps.append(s)
        _booting(daemon, "aws-spot", "aws3", "i-0gang")

    with imds(aws.proof("i-0gang")) as (url, _):
        assert enroll(_agent(daemon, url, token_file), "aws4", wait_s=60, sleep=nap) == 1
        assert len(naps) == 1 and not token_file.exists()  # its tag says aws4: a token for aws3 is no use
        assert enroll(_agent(daemon, url, token_file), "aws3", wait_s=60, sleep=nap) == 0
    assert len(naps) == 1 and ".aws3." in token_file.read_text()


def test_the_agent_says_refused_or_not_reached_and_writes_nothing(daemon, aws, tmp_path):
    token_file = tmp_path / "agent.token"
    _booting(daemon, "aws-spot", "aws1", "i-0ready", state=S.READY)
    with imds(aws.proof("i-0ready")) as (url, _):
        assert enroll(_agent(daemon, url, token_file), "aws1", wait_s=5) == 1
    clock = iter(range(0, 1000, 10))
    with imds(aws.proof("i-0never")) as (url, _):
        assert enroll(_agent(daemon, url, token_file), "aws1", wait_s=25, sleep=lambda s: None,
                      clock=lambda: next(clock)) == 3
    with imds({}) as (url, _):  # no identity in this metadata service
        assert enroll(_agent(daemon, url, token_file), "aws1", wait_s=5) == 3
    assert not token_file.exists()
    bare = AgentConfig(provider="aws", daemon_url=daemon.url)  # no token file configured: nothing to do
    assert enroll(bare, "aws1") == 0
    token_file.write_text("someone else's\n")
    token_file.chmod(0o644)
    assert enroll(_agent(daemon, "http://127.0.0.1:9", token_file), "aws1") == 2  # others may read it: refused


def test_a_gcp_agent_asks_for_a_full_token_for_its_daemons_url(daemon, google, tmp_path):
    _booting(daemon, "gcp-spot", "gcp2", "europe-west4-a/burstd-gcp2-y")
    asked: list[dict] = []

    class Handler(Quiet):
        def do_GET(self):
            q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
            asked.append(q)
            ok = self.headers.get("Metadata-Flavor") == "Google" and urlparse(self.path).path.endswith("/identity")
            body = google.token("burstd-gcp2-y", "europe-west4-a", "proj", q.get("audience", ""),
                                full=q.get("format") == "full").encode() if ok else b""
            self.answer(200 if ok else 403, body)

    token_file = tmp_path / "agent.token"
    with _serve(Handler) as url:
        assert enroll(_agent(daemon, url, token_file, provider="gcp"), "gcp2", wait_s=5) == 0
    assert asked == [{"audience": daemon.url, "format": "full"}]
    assert ".gcp2." in token_file.read_text()


def test_burstd_agent_enroll_from_its_config_file_as_the_bootstrap_runs_it(daemon, aws, tmp_path):
    _booting(daemon, "aws-spot", "aws4", "i-0cli")
    token_file = tmp_path / "agent.token"
    with imds(aws.proof("i-0cli")) as (url, _):
        conf = tmp_path / "burstd.toml"
        conf.write_text(f'[agent]\nprovider = "aws"\nmetadata_url = "{url}"\ndaemon_url = "{daemon.url}"\n'
                        f'daemon_ca_file = "{daemon.ca}"\ndaemon_token_file = "{token_file}"\n')
        argv = [sys.executable, "-m", "burstd.agent.main", "--config", str(conf), "--node", "aws4", "--enroll"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "node aws4 (lease" in done.stderr and ".aws4." in token_file.read_text()
        assert done.stdout == ""  # the bootstrap reads nothing from it, and the token is never printed
        assert token_file.read_text().strip() not in done.stderr
