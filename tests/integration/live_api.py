"""A real control API (FastAPI over its unix socket, real SQLite Store, the real Reconciler) whose only fakes are
Slurm and the cloud: what ``burstctl`` talks to in tests that do not need a bed."""

from __future__ import annotations

import contextlib
from pathlib import Path

from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.reconcile import Reconciler
from burstd.db.store import Store
from burstd.policy.decide import decide
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider

# netns_prefix: not a bed's ("sl-"), so a VM that a bed on another worker runs as sl-cloud1 is not this pool's
POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "local": {"netns_prefix": "lapi-"},
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 3.6}
POOL_TOML = """
[[pools]]
name = "local"
provider = "local"
partition = "cloud"
node_prefix = "cloud"
node_count = 4
price_per_hour = 3.6
instance_types = [{ name = "ns", cpus = 2, memory_mb = 1000 }]
local = { netns_prefix = "lapi-" }
"""


@contextlib.contextmanager
def live_api(tmp_path: Path, adapter=None, **tables):
    """Yields (config path for burstctl -c, reconciler, store, adapter, provider, clock)."""
    cfg = parse_config({"api": {"socket": str(tmp_path / "s.sock")}, "pools": [POOL],
                        "database": {"url": f"sqlite:///{tmp_path}/burstd.db"},
                        "budget": {"accounts": {"chem": 10, "bio": 10}}, **tables})
    clock = FakeClock(1_773_144_000.0)
    store = Store.open(cfg.database.url)
    adapter = adapter or FakeAdapter()
    provider = FakeProvider("local", clock)
    rec = Reconciler(cfg, store, adapter, {"local": provider}, decide, clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    path = tmp_path / "burstd.toml"
    path.write_text(f'[api]\nsocket = "{cfg.api.socket}"\n[database]\nurl = "{cfg.database.url}"\n' + POOL_TOML)
    try:
        yield str(path), rec, store, adapter, provider, clock
    finally:
        server.stop()
        store.close()
