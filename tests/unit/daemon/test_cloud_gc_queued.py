"""`burstctl cloud gc` goes through the daemon: the orphan rule is the daemon's own (``providers.orphans``), the
dry run lists what the last cycle saw and changes nothing, and a real run is queued for the leader, which
terminates the orphans under its fence and records each kill first (issue 20: the CLI used to open the database
and the clouds itself, record nothing, and kill a gang's VMs between launch and tagging)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.leadership import Elector
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import LeaseState as S
from burstd.providers.base import Instance
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

POOL = """
[[pools]]
name = "local"
provider = "local"
partition = "cloud"
node_prefix = "cloud"
node_count = 4
price_per_hour = 0.1
instance_types = [{ name = "ns", cpus = 2, memory_mb = 1000 }]
"""


@pytest.fixture
def ha(tmp_path):
    """Two daemons on one store; the CLI talks to the standby's API (``b``), as it may after a failover."""
    cfg = parse_config({"api": {"socket": str(tmp_path / "s.sock")}, "daemon": {"orphan_grace_s": 3600}, "budget": {"default_account_usd": 50},
                        "pools": [{"name": "local", "provider": "local", "partition": "cloud",
                                   "node_prefix": "cloud", "node_count": 4, "price_per_hour": 0.1,
                                   "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}]}]})
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    recs = {}
    for name in ("a", "b"):
        elector = Elector(store, f"head-{name}", lease_s=30, clock=clock)
        elector.tick()
        recs[name] = Reconciler(cfg, store, adapter, {"local": provider}, first_rule, clock=clock, leadership=elector)
    server = ApiServer(create_app(recs["b"], cfg), cfg)
    server.start()
    assert server.wait_started()
    path = tmp_path / "burstd.toml"
    path.write_text(f'[api]\nsocket = "{cfg.api.socket}"\n' + POOL)
    yield str(path), recs, store, adapter, provider, clock
    server.stop()


def gc(path, *args):
    return CliRunner().invoke(app, ["cloud", "gc", "--json", "-c", path, *args])


def test_gc_is_queued_to_the_leader_which_kills_fenced_and_recorded(ha):
    path, recs, store, adapter, provider, clock = ha
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    recs["a"].intake.request_resume(["cloud1"], {"cloud1": (7,)})
    recs["a"].cycle()
    [leased] = provider.live()
    stray = Instance("i-stray", "gone-lease", "cloud2", "local", "running", clock() - 60)
    provider.instances[stray.instance_id] = stray
    clock.advance(1)

    r = gc(path, "--dry-run")  # the standby has not listed the clouds: it says so, it does not guess
    assert r.exit_code == 1 and "standby" in r.output

    r = gc(path, "--grace", "0")  # a real run on the standby's API: queued for the leader, nothing done here
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["queued"] is True
    assert provider.terminate_calls == [] and store.orphan_log == []

    recs["a"].cycle()  # the leader's orphan sweep, with the admin's grace, then a plain cycle lists it gone
    assert provider.terminate_calls == ["i-stray"] and leased.instance_id in provider.instances
    epoch = recs["a"].leadership.fence.epoch
    assert store.orphan_log == [{"pool": "local", "instance_id": "i-stray", "lease_id": "gone-lease",
                                 "epoch": epoch}]
    assert [i for i in store.intents() if i.kind == "gc"] == []  # swept: forgotten
    recs["a"].cycle()
    assert provider.terminate_calls == ["i-stray"]  # once; the daemon's own grace (an hour) spares the rest


def test_dry_run_lists_what_the_last_cycle_saw_and_changes_nothing(ha, tmp_path):
    path, recs, store, adapter, provider, clock = ha
    server = ApiServer(create_app(recs["a"], recs["a"].config), recs["a"].config.model_copy(
        update={"api": recs["a"].config.api.model_copy(update={"socket": str(tmp_path / "a.sock")})}))
    server.start()
    assert server.wait_started()
    leader = tmp_path / "leader.toml"
    leader.write_text(f'[api]\nsocket = "{tmp_path / "a.sock"}"\n' + POOL)
    try:
        provider.instances["i-old"] = Instance("i-old", "", "cloud3", "local", "running", clock() - 7200)
        provider.instances["i-new"] = Instance("i-new", "other", "cloud4", "local", "running", clock() - 5)
        r = gc(str(leader), "--dry-run")
        assert r.exit_code == 1 and "not listed the clouds yet" in r.output  # before the first cycle
        recs["a"].cycle()
        # the daemon's grace is an hour: its own sweep took i-old (recorded); the next cycle lists it gone
        assert provider.terminate_calls == ["i-old"] and len(store.orphan_log) == 1
        recs["a"].cycle()
        r = gc(str(leader), "--dry-run", "--grace", "0")
        assert r.exit_code == 0, r.output
        answer = json.loads(r.output)
        assert answer["dry_run"] is True and answer["queued"] is False
        assert [(o["instance_id"], o["reason"]) for o in answer["orphans"]] == [
            ("i-new", "lease other is not open; up 5s (grace 0s)")]
        assert provider.terminate_calls == ["i-old"] and len(store.orphan_log) == 1 and store.intents() == []
        r = CliRunner().invoke(app, ["cloud", "gc", "--dry-run", "--pool", "nope", "-c", str(leader)])
        assert r.exit_code == 1 and "nope" in r.output
    finally:
        server.stop()
