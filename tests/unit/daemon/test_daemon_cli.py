"""burstctl's ops commands: slurm-conf from the config, and reads/changes against a live API (fake edges)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.cli.ops_cmd import install_hooks
from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore

POOLS = [
    {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
     "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.1},
    {"name": "gpu", "provider": "local", "partition": "cloud-gpu", "node_prefix": "gpu", "node_count": 2,
     "instance_types": [{"name": "g", "cpus": 8, "memory_mb": 64000, "gpus": 4, "gpu_type": "a100"}],
     "price_per_hour": 3.0, "market": "on-demand"},
]


def test_install_hooks_writes_executable_scripts(tmp_path):
    paths = install_hooks(str(tmp_path), "/usr/bin/python3", "/etc/burstd/burstd.toml")
    assert sorted(os.path.basename(p) for p in paths) == ["resume", "resume-fail", "suspend"]
    text = (tmp_path / "resume").read_text()
    assert os.access(tmp_path / "resume", os.X_OK)
    assert "exec /usr/bin/python3 -m burstd.daemon.hooks resume \"$@\"" in text


@pytest.mark.parametrize("evil", ["/tmp/it's/burstd.toml", '/tmp/$(touch {pwned})/b.toml', "/tmp/`touch {pwned}`",
                                  "/tmp/a b;touch {pwned}/c", '/tmp/"q"\\/d.toml'])
def test_a_hook_script_runs_nothing_from_a_hostile_config_path(tmp_path, evil):
    """Issue 9 item 8: the generated script is run as SlurmUser; quoting keeps every path a plain argument."""
    import subprocess

    pwned = tmp_path / "pwned"
    config_path = evil.format(pwned=pwned)
    fake_python = tmp_path / "py thon's"  # a path that itself needs quoting
    fake_python.write_text('#!/bin/sh\nprintf "%s\\n" "$BURSTD_CONFIG" "$@"\n')
    fake_python.chmod(0o755)
    hooks = tmp_path / "hooks"
    install_hooks(str(hooks), str(fake_python), config_path)
    out = subprocess.run([str(hooks / "resume"), "cloud[1-2]"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [config_path, "-m", "burstd.daemon.hooks", "resume", "cloud[1-2]"]
    assert not pwned.exists()


def test_a_hook_script_refuses_a_line_break_in_a_path(tmp_path):
    with pytest.raises(ValueError, match="line break"):
        install_hooks(str(tmp_path), "/usr/bin/python3", "/etc/burstd/x\ntouch /tmp/pwned")


@pytest.fixture
def live(tmp_path):
    cfg = parse_config({"api": {"socket": str(tmp_path / "s.sock")}, "pools": POOLS[:1],
                        "budget": {"default_account_usd": 50}})
    clock = FakeClock()
    store = FakeStore(clock)
    rec = Reconciler(cfg, store, FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule, clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    path = tmp_path / "burstd.toml"
    path.write_text(f'[api]\nsocket = "{cfg.api.socket}"\n' + """
[[pools]]
name = "local"
provider = "local"
partition = "cloud"
node_prefix = "cloud"
node_count = 4
price_per_hour = 0.1
instance_types = [{ name = "ns", cpus = 2, memory_mb = 1000 }]
""")
    yield str(path), rec, store
    server.stop()


def test_status_leases_pause_through_the_api(live):
    path, rec, store = live
    rec.intake.request_resume(["cloud2"], {"cloud2": (11,)})
    rec.cycle()
    r = CliRunner().invoke(app, ["status", "--json", "-c", path])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["leases_by_state"] == {"BOOTING": 1}
    r = CliRunner().invoke(app, ["leases", "--json", "-c", path])
    rows = json.loads(r.output)
    assert [(x["node_name"], x["state"], x["job_ids"]) for x in rows] == [("cloud2", "BOOTING", [11])]
    r = CliRunner().invoke(app, ["pause", "-c", path])
    assert r.exit_code == 0 and store.pause_state().paused is True
    r = CliRunner().invoke(app, ["drain", "onprem1", "-c", path])
    assert r.exit_code != 0 and "unknown node" in r.output
    r = CliRunner().invoke(app, ["events", "--json", "-c", path])
    assert [e["to_state"] for e in json.loads(r.output)] == ["REQUESTED", "LAUNCHING", "BOOTING"]


def test_explain_says_why_a_job_waits(live):
    from burstd.domain.slurm import Job

    path, rec, store = live
    now = rec.clock()
    rec.adapter.jobs = [Job(77, "j", "alice", "chem", ("batch",), "PENDING", reason="Resources",
                            submit_time=int(now - 10))]
    rec.cycle()
    r = CliRunner().invoke(app, ["explain", "77", "--json", "-c", path])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["job_id"] == 77 and data["burst"] is False and "waited 10s" in json.dumps(data)
    r = CliRunner().invoke(app, ["explain", "78", "-c", path])
    assert "not in the queue" in r.output or "not in the last" in r.output


def test_explain_of_a_job_submitted_after_the_last_cycle_says_so_not_that_it_is_gone(live):
    """Issue 26: right after sbatch, ``explain`` said "not in the queue", as for a job long gone."""
    from burstd.domain.slurm import Job

    path, rec, _ = live
    rec.cycle()
    rec.adapter.jobs = [Job(90, "j", "alice", "chem", ("batch",), "PENDING", reason="Priority",
                            submit_time=int(rec.clock()))]  # Slurm has it; burstd's last snapshot does not
    data = json.loads(CliRunner().invoke(app, ["explain", "90", "--json", "-c", path]).output)
    assert data["found"] is False and data["state"] == "PENDING", data
    assert "newer than burstd's last look" in data["sentence"] and "not in the queue" not in data["sentence"]
    rec.cycle()  # the next cycle sees it: the usual answer
    data = json.loads(CliRunner().invoke(app, ["explain", "90", "--json", "-c", path]).output)
    assert data["found"] is True and data["state"] == "PENDING", data


def test_explain_answers_for_running_and_unknown_jobs_and_before_any_decision(live):
    from burstd.domain.slurm import Job

    path, rec, _ = live
    rec.adapter.jobs = [Job(80, "j", "alice", "chem", ("batch",), "RUNNING", nodes="onprem1")]
    rec.cycle()
    r = CliRunner().invoke(app, ["explain", "80", "--json", "-c", path])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["found"] is True and data["state"] == "RUNNING" and "running on-prem on onprem1" in data["sentence"]
    r = CliRunner().invoke(app, ["explain", "81", "-c", path])
    assert r.exit_code == 0 and "job 81: not in the queue" in r.output

    # no decision recorded yet (first cycle, or the decider failed): the API decides afresh
    rec.last_decisions = None
    rec.adapter.jobs = [Job(82, "j", "alice", "chem", ("batch",), "PENDING", reason="Resources",
                            submit_time=int(rec.clock() - 10))]
    rec.last_snapshot = rec.adapter.snapshot()
    r = CliRunner().invoke(app, ["explain", "82", "--json", "-c", path])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["job_id"] == 82 and data["burst"] is False and "waited 10s" in data["reason"]


def test_status_reports_slurmctlds_health_from_the_adapter(live):
    path, rec, store = live
    r = CliRunner().invoke(app, ["status", "--json", "-c", path])
    assert json.loads(r.output)["slurmctld"] is None  # a backend without a health probe says nothing
    rec.adapter.ctld_health = lambda: {"ok": False, "via": "readyz", "url": "http://10.77.0.1:6817/readyz",
                                       "detail": "503 Service Unavailable"}
    r = CliRunner().invoke(app, ["status", "--json", "-c", path])
    assert json.loads(r.output)["slurmctld"]["ok"] is False
    r = CliRunner().invoke(app, ["status", "-c", path])
    assert r.exit_code == 0, r.output
    assert "slurmctld: NOT READY: 503 Service Unavailable (readyz http://10.77.0.1:6817/readyz)" in r.output
    rec.adapter.ctld_health = lambda: {"ok": True, "via": "scontrol ping", "detail": "Slurmctld(primary) at h is UP"}
    r = CliRunner().invoke(app, ["status", "-c", path])
    assert "slurmctld: ready (scontrol ping)" in r.output


def test_explain_reads_array_and_het_ids_as_slurm_writes_them(live):
    """Issue 26: ``explain 1234_5`` was read as job 12345 (Python's int() takes underscores)."""
    from burstd.domain.slurm import Job

    path, rec, _ = live
    rec.adapter.jobs = [Job(12345, "other", "bob", "bio", ("batch",), "RUNNING", nodes="onprem2"),
                        Job(1240, "task", "alice", "chem", ("batch",), "RUNNING", nodes="onprem1",
                            array_job_id=1234, array_task_id=5),
                        Job(1301, "het", "alice", "chem", ("batch",), "RUNNING", nodes="onprem3",
                            het_job_id=1300, het_job_offset=1)]
    rec.cycle()
    r = CliRunner().invoke(app, ["explain", "1234_5", "--json", "-c", path])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["job_id"] == 1240 and "job 1234_5 (chem/alice): running on-prem on onprem1" == data["sentence"]
    r = CliRunner().invoke(app, ["explain", "1300+1", "-c", path])
    assert r.exit_code == 0 and "on onprem3" in r.output
    r = CliRunner().invoke(app, ["explain", "1234_[1-9]", "-c", path])
    assert r.exit_code == 0 and "on onprem1" in r.output
    r = CliRunner().invoke(app, ["explain", "12x", "-c", path])
    assert r.exit_code == 2 and "job id '12x'" in r.output


def test_explain_shows_the_checkpoint_interval_a_cloud_job_gets_from_its_pools_preemptions(live):
    """Issue 22 item 3: the pool's observed rate, and the Young/Daly interval it leads to."""
    from burstd.domain.lease import LeaseState
    from burstd.domain.slurm import Job

    path, rec, store = live
    now = rec.clock()
    old = store.create_lease(pool="local", node_name="cloud1", at=now - 4 * 3600)
    for state in (LeaseState.LAUNCHING, LeaseState.BOOTING):
        store.transition(old.lease_id, state)
    store.transition(old.lease_id, LeaseState.READY, ready_at=now - 4 * 3600)
    store.transition(old.lease_id, LeaseState.FAILED, "preempted: the provider reclaimed the instance",
                     ended_at=now)
    rec.adapter.jobs = [Job(90, "j", "alice", "chem", ("cloud",), "RUNNING", nodes="cloud2"),
                        Job(91, "j", "alice", "chem", ("batch",), "RUNNING", nodes="onprem1")]
    rec.cycle()
    r = CliRunner().invoke(app, ["explain", "90", "--json", "-c", path])
    assert r.exit_code == 0, r.output
    cp = json.loads(r.output)["checkpoint"]
    assert (cp["pool"], cp["preemptions"], cp["node_hours"], cp["rate_per_node_hour"]) == ("local", 1, 4.0, 0.25)
    assert cp["mtbf_s"] == 4 * 3600 and cp["interval_s"] is None  # the save cost is the job's to measure
    r = CliRunner().invoke(app, ["explain", "90", "-c", path])
    assert "checkpoint interval: sqrt(2 x save x 14400 s) of work, e.g. 169 s for a 1 s save" in r.output
    r = CliRunner().invoke(app, ["explain", "91", "--json", "-c", path])
    assert json.loads(r.output)["checkpoint"] is None  # on-prem: no cloud pool, no interval
