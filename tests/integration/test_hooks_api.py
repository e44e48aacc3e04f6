"""The Slurm hooks and the control API against the real daemon process on the bed.

* the bed's own hook scripts (burstd mode, what slurmctld runs) fail fast with a clear message on a malformed
  hostlist, an unknown node, or while the daemon is down;
* peer credentials, not only file modes: a second real uid that may connect (it is in ``socket_group``) can
  read but is refused every mutating call; a uid outside the group cannot even connect.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from burstd.testbed.daemon_process import PKG_ROOT, DaemonProcess
from tests.integration.daemon_bed import bed_daemon_config, cleanup_vms, world_readable_dir

pytestmark = [pytest.mark.bed]


def run_hook(bed, kind: str, *args: str) -> tuple[int, str, float]:
    script = bed.paths["hooks"] / kind.replace("-", "_")
    t0 = time.monotonic()
    p = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr, time.monotonic() - t0


@pytest.fixture
def daemon_on_bed(slurm_bed, tmp_path):
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd")
    d = DaemonProcess(cfg_path, log_path=tmp_path / "burstd.log")
    with slurm_bed.hooks("burstd"):
        d.start()
        try:
            yield d
        finally:
            d.stop()
            cleanup_vms(cfg_path)


@pytest.mark.parametrize("kind, args, code, message", [
    ("resume", ["cloud[1-"], 2, "malformed hostlist"),
    ("resume", ["cloud1;reboot"], 2, "bad name"),
    ("suspend", ["nosuchnode7"], 2, "unknown node(s) nosuchnode7"),
    ("resume-fail", ["cloud[1,999]"], 2, "unknown node(s) cloud999"),
    ("resume", [], 2, "usage"),
])
def test_bed_hook_rejects_bad_input_with_a_clear_message(slurm_bed, daemon_on_bed, kind, args, code, message):
    rc, err, took = run_hook(slurm_bed, kind, *args)
    assert rc == code and message in err, err
    assert err.startswith("burstd-hook:")
    assert took < 30  # returned on its own (never hangs); speed itself is measured in bench/


def test_bed_hook_accepts_a_known_node(slurm_bed, daemon_on_bed):
    rc, err, _ = run_hook(slurm_bed, "suspend", slurm_bed.cloud_nodes[0])  # no lease: a no-op for burstd
    assert rc == 0, err


def test_bed_hook_fails_fast_while_the_daemon_is_down(slurm_bed, tmp_path):
    with slurm_bed.hooks("burstd"):
        rc, err, took = run_hook(slurm_bed, "resume", slurm_bed.cloud_nodes[0])
    assert rc == 3 and "is the daemon running" in err, err
    assert took < 30


# The second uid runs the standard-library client (burstd.daemon.client.unix_request) with the system python:
# the test venv may live where other users cannot execute it.
USER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def _call_as(user: str, sock, method: str, path: str, payload=None) -> tuple[int, object]:
    code = ("import json, sys\n"
            "from burstd.daemon.client import unix_request, ApiError\n"
            "try:\n"
            f"    print(json.dumps([200, unix_request({str(sock)!r}, {method!r}, {path!r}, {payload!r}, 10)]))\n"
            "except ApiError as e:\n"
            "    print(json.dumps([e.status or 0, str(e)]))\n")
    p = subprocess.run(["runuser", "-u", user, "--", USER_PYTHON, "-c", code], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": PKG_ROOT})
    assert p.returncode == 0, p.stderr
    status, body = json.loads(p.stdout)
    return status, body


@pytest.fixture
def shared_daemon(slurm_bed, bed_user, other_user):
    """A daemon whose socket ``other_user`` may open (socket_group = its group), admin_group = root."""
    d = world_readable_dir("burstd-api-")
    cfg_path = bed_daemon_config(slurm_bed, d / "cfg", api={"socket": str(d / "burstd.sock"),
                                                            "socket_group": other_user, "admin_group": "root"})
    os.chmod(d / "cfg", 0o755)
    os.chmod(cfg_path, 0o644)
    daemon = DaemonProcess(cfg_path, log_path=d / "burstd.log")
    daemon.start()
    try:
        yield cfg_path, d / "burstd.sock"
    finally:
        daemon.stop()
        cleanup_vms(cfg_path)
        shutil.rmtree(d, ignore_errors=True)


def test_group_member_reads_but_mutating_calls_are_refused_by_peer_credentials(shared_daemon, other_user):
    import grp

    cfg_path, sock = shared_daemon
    st = os.stat(sock)
    assert st.st_mode & 0o777 == 0o660 and st.st_gid == grp.getgrnam(other_user).gr_gid

    status, body = _call_as(other_user, sock, "GET", "/v1/status")
    assert status == 200 and body["cluster"], body

    uid = int(subprocess.run(["id", "-u", other_user], capture_output=True, text=True).stdout)
    for method, path, payload in (("POST", "/v1/pause", {}), ("POST", "/v1/nodes/cloud1/drain", {}),
                                  ("POST", "/v1/nodes/cloud1/terminate", {}), ("PUT", "/v1/budgets/physics",
                                                                               {"usd": 10}),
                                  ("POST", "/v1/hooks/resume", {"hostlist": "cloud1"})):
        status, body = _call_as(other_user, sock, method, path, payload)
        assert status == 403 and f"permission denied for uid {uid}" in body, (path, status, body)
    # and nothing changed: root still sees bursting on, no lease
    from burstd.daemon.client import ApiClient

    with ApiClient(str(sock)) as api:
        assert api.get("/v1/status")["paused"] is False
        assert api.get("/v1/leases", all=True) == []


def test_uid_outside_the_socket_group_cannot_connect(shared_daemon, bed_user):
    _, sock = shared_daemon
    status, body = _call_as(bed_user, sock, "GET", "/v1/status")
    assert status == 0 and "Permission denied" in body and "api.socket_group" in body, body
