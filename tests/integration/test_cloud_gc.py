"""`burstctl cloud gc` on both clouds (moto, the GCE fake): orphans (tagged, no open lease, past the grace) are
listed by the daemon's rule and terminated by its cycle, each kill recorded first."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.daemon.control import DaemonControl
from burstd.daemon.reconcile import Reconciler
from burstd.db.store import Store
from burstd.domain.lease import LeaseState as S
from burstd.providers.base import LaunchRequest
from burstd.providers import make_provider
from tests.fakes.toml_out import dumps as _toml
from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401
from tests.unit.daemon.fakes import FakeAdapter
from tests.unit.daemon.first_rule import first_rule


def site_config(aws_env, gce_env, grace=0.0):
    subnets = sorted(aws_env.client(direct=True).describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"])
    return {
        "cluster": {"id": "site1"},
        "daemon": {"orphan_grace_s": grace},
        "cloud": {"api_attempts": 2, "retry_base_s": 0.001, "retry_max_s": 0.01},
        "pools": [
            {"name": "aws", "provider": "aws", "partition": "cloud-aws", "node_prefix": "aws-", "node_count": 4,
             "price_per_hour": 0.05, "instance_types": [{"name": "m5.large", "cpus": 2, "memory_mb": 7000}],
             "aws": {"region": "us-east-1", "subnets": [subnets[0]["SubnetId"]], "image_id": "ami-12c6146b",
                     "conf_server": "10.0.0.1:6817",
                     "endpoint_url": aws_env.url}},
            {"name": "gcp", "provider": "gcp", "partition": "cloud-gcp", "node_prefix": "gcp-", "node_count": 4,
             "price_per_hour": 0.03, "instance_types": [{"name": "n2-standard-2", "cpus": 2, "memory_mb": 7000}],
             "gcp": {"project": gce_env.project, "region": "us-central1", "zones": ["us-central1-a"],
                     "api_endpoint": gce_env.url, "anonymous_credentials": True}},
        ],
    }


def launch_some(cfg):
    providers = {p.name: make_provider(p, cfg) for p in cfg.pools}
    for pool, p in providers.items():
        for i in (1, 2, 3):
            p.launch(LaunchRequest(lease_id=f"{pool}-lease-{i}", node_name=f"{pool}-{i}", pool=pool))
    return providers


def alive(providers) -> dict[str, set[str]]:
    return {name: {i.lease_id for i in p.list_instances() if not i.is_gone} for name, p in providers.items()}


def daemon(cfg, providers, tmp_path, live=()):
    """A daemon (real Store, real cloud providers, a fake Slurm) whose open leases own the VMs of ``live``."""
    store = Store.open(f"sqlite:///{tmp_path}/burstd.db")
    by_lease = {i.lease_id: i for p in providers.values() for i in p.list_instances()}
    for lease_id in live:
        inst = by_lease[lease_id]
        store.create_lease(pool=inst.pool, node_name=inst.node_name, lease_id=lease_id)
        store.transition(lease_id, S.LAUNCHING, "launch")
        store.transition(lease_id, S.BOOTING, "up", instance_id=inst.instance_id, launched_at=inst.launched_at)
    rec = Reconciler(cfg, store, FakeAdapter(), providers, first_rule)
    return rec, DaemonControl(rec, cfg), store


def orphan_leases(answer) -> list[str]:
    return sorted(o["lease_id"] for o in answer["orphans"])


def test_dry_run_changes_nothing_and_gc_terminates_only_orphans_recorded(aws_env, gce_env, tmp_path):
    cfg = parse_config(site_config(aws_env, gce_env, grace=3600))  # the daemon's own sweep spares them all
    providers = launch_some(cfg)
    rec, ctl, store = daemon(cfg, providers, tmp_path, live=("aws-lease-1", "gcp-lease-2"))
    rec.cycle()
    before = alive(providers)
    answer = ctl.gc(dry_run=True, grace_s=0, pool=None, by="test")
    assert orphan_leases(answer) == ["aws-lease-2", "aws-lease-3", "gcp-lease-1", "gcp-lease-3"]
    assert alive(providers) == before and store.orphan_terminations() == [] and store.intents() == []
    assert ctl.gc(dry_run=False, grace_s=0, pool=None, by="test")["queued"] is True
    assert alive(providers) == before  # queued: the cycle does it
    rec.cycle()
    assert alive(providers) == {"aws": {"aws-lease-1"}, "gcp": {"gcp-lease-2"}}
    assert sorted(r["lease_id"] for r in store.orphan_terminations()) == orphan_leases(answer)  # each recorded
    rec.cycle()  # running it again finds nothing (idempotent)
    assert orphan_leases(ctl.gc(dry_run=True, grace_s=0, pool=None, by="test")) == []
    assert len(store.orphan_terminations()) == 4
    store.close()


def test_instances_younger_than_the_grace_are_left_alone(aws_env, gce_env, tmp_path):
    cfg = parse_config(site_config(aws_env, gce_env, grace=3600))
    providers = launch_some(cfg)
    rec, ctl, store = daemon(cfg, providers, tmp_path)
    rec.cycle()
    assert ctl.gc(dry_run=False, grace_s=None, pool=None, by="test")["orphans"] == []
    rec.cycle()
    assert sum(len(v) for v in alive(providers).values()) == 6
    ctl.gc(dry_run=False, grace_s=0, pool="gcp", by="test")
    rec.cycle()
    assert alive(providers)["gcp"] == set() and len(alive(providers)["aws"]) == 3
    assert {r["pool"] for r in store.orphan_terminations()} == {"gcp"}
    store.close()


def test_burstctl_cloud_instances_lists_both_clouds_as_json(aws_env, gce_env, tmp_path):
    import tomllib  # noqa: F401  (the config is written as TOML below)

    data = site_config(aws_env, gce_env)
    launch_some(parse_config(data))
    path = tmp_path / "burstd.toml"
    path.write_text(_toml(data))
    result = CliRunner().invoke(app, ["cloud", "instances", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted((r["pool"], r["node"]) for r in rows) == [("aws", f"aws-{i}") for i in (1, 2, 3)] + \
        [("gcp", f"gcp-{i}") for i in (1, 2, 3)]


def test_burstctl_cloud_gc_on_an_unknown_pool_names_it(aws_env, gce_env, tmp_path):
    path = tmp_path / "burstd.toml"
    path.write_text(_toml(site_config(aws_env, gce_env)))
    result = CliRunner().invoke(app, ["cloud", "gc", "--dry-run", "--pool", "nope", "--config", str(path)])
    assert result.exit_code == 1 and "nope" in result.output


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch):
    monkeypatch.delenv("BURSTD_CONFIG", raising=False)
