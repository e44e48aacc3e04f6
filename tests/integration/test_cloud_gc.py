"""`burstctl cloud gc`: orphans (tagged, no live lease, past the grace) are terminated on both clouds."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.cli.cloud_cmd import run_gc
from burstd.config import parse_config
from burstd.providers.base import LaunchRequest
from burstd.providers import make_provider
from tests.fakes.toml_out import dumps as _toml
from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401


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


def test_dry_run_changes_nothing_and_gc_terminates_only_orphans(aws_env, gce_env):
    cfg = parse_config(site_config(aws_env, gce_env))
    providers = launch_some(cfg)
    live = {"aws-lease-1", "gcp-lease-2"}
    before = alive(providers)
    rows = run_gc(cfg, dry_run=True, grace_s=None, pool=None, live_ids=lambda c: live)
    assert sorted(r["lease_id"] for r in rows) == ["aws-lease-2", "aws-lease-3", "gcp-lease-1", "gcp-lease-3"]
    assert alive(providers) == before
    rows = run_gc(cfg, dry_run=False, grace_s=None, pool=None, live_ids=lambda c: live)
    assert all(r["terminated"] for r in rows) and len(rows) == 4
    assert alive(providers) == {"aws": {"aws-lease-1"}, "gcp": {"gcp-lease-2"}}
    # Running it again finds nothing (idempotent).
    assert run_gc(cfg, dry_run=False, grace_s=None, pool=None, live_ids=lambda c: live) == []


def test_instances_younger_than_the_grace_are_left_alone(aws_env, gce_env):
    cfg = parse_config(site_config(aws_env, gce_env, grace=3600))
    providers = launch_some(cfg)
    assert run_gc(cfg, dry_run=False, grace_s=None, pool=None, live_ids=lambda c: set()) == []
    assert sum(len(v) for v in alive(providers).values()) == 6
    rows = run_gc(cfg, dry_run=False, grace_s=0, pool="gcp", live_ids=lambda c: set())
    assert {r["pool"] for r in rows} == {"gcp"} and alive(providers)["gcp"] == set()


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
