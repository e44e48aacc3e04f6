"""The control API over a real unix socket (uvicorn), with the daemon's edges faked."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.client import ApiClient, ApiError, post_unix_json
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.lease import LeaseState
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _config(tmp_path):
    return parse_config({
        "api": {"socket": str(tmp_path / "burstd.sock")},
        "daemon": {"state_dir": str(tmp_path)},
        "budget": {"default_account_usd": 20},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
    })


def _hook_config(tmp_path, socket) -> Path:
    """The hooks' config. These tests check what the daemon records, so the hook waits 15 s, not the 2 s a site
    runs with: the uvicorn server shares its pytest worker's core with nine more under the whole suite, and 2 s
    timed out once there (test_hook_edges.py tests the bound itself)."""
    cfg_file = tmp_path / "burstd.toml"
    cfg_file.write_text(f'[api]\nsocket = "{socket}"\n[daemon]\nhook_timeout_s = 15\n')
    return cfg_file


@pytest.fixture
def daemon(tmp_path):
    cfg = _config(tmp_path)
    clock = FakeClock()
    store = FakeStore(clock)
    rec = Reconciler(cfg, store, FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule, clock=clock)
    woken = []
    rec.on_wake = lambda: woken.append(1)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    cfg_file = _hook_config(tmp_path, cfg.api.socket)
    yield cfg, rec, store, woken, cfg_file
    server.stop()


def hook(cfg_file, *args, env=None):
    e = dict(os.environ, BURSTD_CONFIG=str(cfg_file), PYTHONPATH=REPO, **(env or {}))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "burstd.daemon.hooks", *args], env=e, capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stderr, time.monotonic() - t0

DATA = Path(__file__).resolve().parents[2] / "data"


def test_socket_is_group_restricted(daemon):
    cfg, *_ = daemon
    st = os.stat(cfg.api.socket)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == 0


def test_resume_hook_records_leases_with_jobs_from_resume_file(daemon, tmp_path):
    cfg, rec, store, woken, cfg_file = daemon
    resume = tmp_path / "resume.json"
    resume.write_text(json.dumps({"jobs": [{"job_id": 5, "nodes": "cloud[2-3]"}], "all_nodes": "cloud[2-3]"}))
    rc, err, _ = hook(cfg_file, "resume", "cloud[2-3]", env={"SLURM_RESUME_FILE": str(resume)})
    assert rc == 0, err
    leases = sorted(store.leases(), key=lambda x: x.node_name)
    assert [(x.node_name, x.state, x.job_ids) for x in leases] == [
        ("cloud2", LeaseState.REQUESTED, (5,)), ("cloud3", LeaseState.REQUESTED, (5,))]
    assert woken


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_resume_file_of_newer_slurm_names_the_jobs_nodes_nodes_alloc(daemon, release):
    """23.02+ writes ``nodes_alloc``/``nodes_resume`` instead of ``nodes`` (files from the live beds)."""
    cfg, rec, store, woken, cfg_file = daemon
    resume = DATA / "resume-files" / f"{release}.json"
    job = json.loads(resume.read_text())["jobs"][0]["job_id"]
    rc, err, _ = hook(cfg_file, "resume", "cloud[1-2]", env={"SLURM_RESUME_FILE": str(resume)})
    assert rc == 0, err
    assert sorted((x.node_name, x.job_ids) for x in store.leases()) == [("cloud1", (job,)), ("cloud2", (job,))]


@pytest.mark.parametrize(("release", "gang"), [("24.11", False), ("26.05", True)])
def test_an_exclusive_job_from_the_resume_file_is_one_gang_where_the_pool_launches_nodes_one_by_one(
        tmp_path, release, gang):
    """26.05's resume file marks job 1 ``exclusive: NODE``: its two nodes go as one gang even with
    ``all_or_nothing = false``; 24.11's file has no such field and the nodes stay on their own."""
    cfg = _config(tmp_path)
    cfg = cfg.model_copy(update={"pools": [cfg.pools[0].model_copy(update={"all_or_nothing": False})]})
    clock = FakeClock()
    store = FakeStore(clock)
    rec = Reconciler(cfg, store, FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule, clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    try:
        assert server.wait_started()
        cfg_file = _hook_config(tmp_path, cfg.api.socket)
        rc, err, _ = hook(cfg_file, "resume", "cloud[1-2]",
                          env={"SLURM_RESUME_FILE": str(DATA / "resume-files" / f"{release}.json")})
        assert rc == 0, err
        gangs = {x.gang for x in store.leases()}
        assert (len(gangs) == 1 and None not in gangs) if gang else gangs == {None}
    finally:
        server.stop()


def test_suspend_hook_queues_intent(daemon):
    cfg, rec, store, woken, cfg_file = daemon
    rc, err, _ = hook(cfg_file, "suspend", "cloud1")
    assert rc == 0, err
    assert [(i.kind, i.node) for i in rec.intake.pending()] == [("suspend", "cloud1")]


@pytest.mark.parametrize("hostlist, message", [
    ("cloud[1-", "unbalanced"),
    ("cloud[3-1]", "backwards"),
    ("cloud1;rm -rf /", "whitespace"),
    ("cloud1;id", "bad name"),
    ("", "usage"),
])
def test_malformed_hostlist_fails_fast_without_calling_daemon(daemon, hostlist, message):
    cfg, rec, store, woken, cfg_file = daemon
    rc, err, _ = hook(cfg_file, "resume", *([hostlist] if hostlist else []))
    assert rc == 2 and message in err and err.startswith("burstd-hook:")
    assert store.leases() == [] and not woken


def test_unknown_node_is_refused_by_daemon(daemon):
    cfg, rec, store, woken, cfg_file = daemon
    rc, err, _ = hook(cfg_file, "resume", "cloud[1,9]")
    assert rc == 2 and "unknown node(s) cloud9" in err
    assert store.leases() == []


def test_hook_fails_fast_when_daemon_is_down(tmp_path):
    cfg_file = tmp_path / "burstd.toml"
    cfg_file.write_text(f'[api]\nsocket = "{tmp_path}/nothing.sock"\n')
    rc, err, took = hook(cfg_file, "resume", "cloud1")
    assert rc == 3 and "is the daemon running" in err and "nothing.sock" in err
    assert took < 10


def test_hook_does_not_hang_on_a_stuck_daemon(tmp_path):
    import socket

    path = str(tmp_path / "stuck.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(1)  # accepts the connection, never answers
    cfg_file = tmp_path / "burstd.toml"
    cfg_file.write_text(f'[api]\nsocket = "{path}"\n[daemon]\nhook_timeout_s = 0.5\n')
    try:
        rc, err, took = hook(cfg_file, "resume", "cloud1")
    finally:
        s.close()
    assert rc == 3 and "timed out" in err


def test_reads_and_admin_calls_for_root(daemon):
    cfg, rec, store, woken, cfg_file = daemon
    with ApiClient(cfg.api.socket) as api:
        assert api.get("/v1/status")["pools"][0]["name"] == "local"
        api.post("/v1/pause")
        assert store.pause_state().paused is True and api.get("/v1/status")["paused"] is True
        assert api.post("/v1/resume")["paused"] is False
        assert "/v1/hooks/resume" in api.get("/openapi.json")["paths"]
        with pytest.raises(ApiError, match="unknown lease state"):
            api.get("/v1/leases", state="NOPE")
        with pytest.raises(ApiError, match="unknown node"):
            api.post("/v1/nodes/onprem1/drain")


def test_a_nodes_leases_are_read_without_the_fleets(daemon, tmp_path):
    """Every VM's dead-man switch asks for its own node's leases: the answer holds that node's only, and a name
    no node can have is refused before the database is asked."""
    cfg, rec, store, woken, cfg_file = daemon
    resume = tmp_path / "resume.json"
    resume.write_text(json.dumps({"jobs": [{"job_id": 5, "nodes": "cloud[2-3]"}], "all_nodes": "cloud[2-3]"}))
    rc, err, _ = hook(cfg_file, "resume", "cloud[2-3]", env={"SLURM_RESUME_FILE": str(resume)})
    assert rc == 0, err
    with ApiClient(cfg.api.socket) as api:
        assert sorted(x["node_name"] for x in api.get("/v1/leases")) == ["cloud2", "cloud3"]
        assert [x["node_name"] for x in api.get("/v1/leases", node="cloud3")] == ["cloud3"]
        assert api.get("/v1/leases", node="cloud1") == []
        with pytest.raises(ApiError, match="422|pattern"):
            api.get("/v1/leases", node="cloud1;rm -rf /")


def test_pause_keeps_who_and_why_and_unprotect_goes_through_the_daemon(daemon):
    cfg, rec, store, woken, cfg_file = daemon
    with ApiClient(cfg.api.socket) as api:
        api.post("/v1/pause", json={"reason": "quota review"})
        pause = api.get("/v1/status")["pause"]
        assert pause["paused"] is True and pause["reason"] == "quota review" and pause["by"]
        with pytest.raises(ApiError, match="not in protected mode"):
            api.post("/v1/pools/local/unprotect")
        with pytest.raises(ApiError, match="no pool 'nope'"):
            api.post("/v1/pools/nope/unprotect")
        for _ in range(cfg.cloud.protect_after_boot_failures):
            rec.health.record_boot_failure("local", "boot timeout")
        assert api.get("/v1/status")["pool_health"]["local"]["protected"] is True
        assert "boot timeout" in api.post("/v1/pools/local/unprotect")["was"]
        assert api.get("/v1/status")["pool_health"]["local"]["protected"] is False


def test_post_unix_json_reports_refusal_detail(daemon):
    cfg, *_ = daemon
    with pytest.raises(ApiError) as e:
        post_unix_json(cfg.api.socket, "/v1/hooks/resume", {"hostlist": "cloud99"})
    assert e.value.status == 404 and "cloud99" in str(e.value)


def test_metrics_render_lease_and_hook_counts(daemon):
    cfg, rec, store, woken, cfg_file = daemon
    rc, err, _ = hook(cfg_file, "resume", "cloud1")
    assert rc == 0, err
    rec.cycle()
    text = rec.metrics.render().decode()
    assert 'burstd_hook_calls_total{hook="resume",outcome="ok"} 1.0' in text
    assert 'burstd_leases{pool="local",state="BOOTING"} 1.0' in text
    assert "burstd_resume_to_launch_seconds_count 1.0" in text
