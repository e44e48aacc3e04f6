"""Issue 9 item 9: under a locked database a Slurm hook gets one clear answer that matches what was recorded:
either the lease is committed and the hook exits 0, or the hook is told nothing was recorded (exit 3, a 503
naming the lock) and no lease appears later. Real SQLite (WAL) held by a second writer; real hook processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.reconcile import Reconciler
from burstd.db.store import Store
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider
from tests.unit.daemon.first_rule import first_rule

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HOOK_TIMEOUT = 1.0


@pytest.fixture
def daemon(tmp_path):
    db = tmp_path / "burstd.db"
    cfg = parse_config({
        "api": {"socket": str(tmp_path / "b.sock")},
        "daemon": {"state_dir": str(tmp_path), "hook_timeout_s": HOOK_TIMEOUT},
        "database": {"url": f"sqlite:///{db}"},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
    })
    store = Store.open(cfg.database.url)
    clock = FakeClock()
    rec = Reconciler(cfg, store, FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule, clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    cfg_file = tmp_path / "burstd.toml"
    cfg_file.write_text(f'[api]\nsocket = "{cfg.api.socket}"\n[daemon]\nhook_timeout_s = {HOOK_TIMEOUT}\n')
    yield db, store, cfg_file
    server.stop()
    store.close()


def _hook(cfg_file, *args):
    env = dict(os.environ, BURSTD_CONFIG=str(cfg_file), PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "burstd.daemon.hooks", *args], env=env, capture_output=True,
                          text=True, timeout=30)


def _hold_write_lock(db, seconds: float) -> threading.Thread:
    locked = threading.Event()

    def hold():
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    t = threading.Thread(target=hold)
    t.start()
    locked.wait(5)
    return t


def test_a_hook_told_nothing_was_recorded_finds_no_lease_later(daemon):
    db, store, cfg_file = daemon
    holder = _hold_write_lock(db, 3 * HOOK_TIMEOUT)
    proc = _hook(cfg_file, "resume", "cloud1")
    holder.join()
    assert proc.returncode == 3, proc.stderr
    assert "503" in proc.stderr and "nothing was recorded" in proc.stderr and "cloud1" in proc.stderr
    time.sleep(0.5)  # anything the daemon might still commit would be there by now
    assert store.lease_for_node("cloud1") is None


def test_a_short_lock_is_waited_out_and_the_hook_is_told_the_truth(daemon):
    db, store, cfg_file = daemon
    holder = _hold_write_lock(db, 0.15 * HOOK_TIMEOUT)
    proc = _hook(cfg_file, "resume", "cloud2")
    holder.join()
    assert proc.returncode == 0, proc.stderr
    assert store.lease_for_node("cloud2") is not None
