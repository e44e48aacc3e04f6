"""The control API's composition (burstd/api/app.py): each route sits in its audience's module, and the gate finds
every route's level from app.routes before reading a body, whatever way the routers are composed."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from burstd.api.app import create_app
from burstd.api.auth import LEVELS, route_level
from burstd.config import parse_config
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

# the tag a route carries (the level the gate checks) -> the module its handler lives in
AUDIENCE = {"public": ("hooks", "enroll"), "hooks": ("hooks",), "agent": ("agent",), "read": ("read",),
            "node_read": ("read",), "admin": ("admin",), "job": ("progress",)}


@pytest.fixture
def app(tmp_path):
    cfg = parse_config({
        "api": {"socket": str(tmp_path / "s.sock")},
        "daemon": {"state_dir": str(tmp_path)},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
    })
    clock = FakeClock()
    rec = Reconciler(cfg, FakeStore(clock), FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule,
                     clock=clock)
    return create_app(rec, cfg)


def _routes(app) -> list[APIRoute]:
    return [r for r in app.routes if isinstance(r, APIRoute)]


def test_the_gate_finds_every_route_and_the_level_its_tag_names(app):
    routes = _routes(app)
    assert len(routes) == 30 and {r.tags[0] for r in routes} == set(LEVELS)
    for route in routes:
        for method in route.methods:
            path = route.path.replace("{node}", "cloud1").replace("{job_id}", "42").replace(
                "{pool}", "local").replace("{account}", "physics")
            scope = {"type": "http", "method": method, "path": path, "root_path": ""}
            assert route_level(app, scope) == route.tags[0], (method, route.path)


def test_each_route_lives_in_its_audiences_module(app):
    for route in _routes(app):
        module = route.endpoint.__module__
        progress_reader = module == "burstd.api.routers.progress" and route.path == "/v1/progress"
        assert module.rpartition(".")[2] in AUDIENCE[route.tags[0]] or progress_reader, (route.path, module)
        assert module.startswith("burstd.api.routers."), (route.path, module)
