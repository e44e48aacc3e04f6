"""Alembic: ``Store.open`` migrates an empty database to head, and the models match the migrations."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from burstd.db.models import metadata
from burstd.db.engine import MIGRATIONS, make_engine, migrate
from burstd.db.store import Store
from burstd.simulate.spot import CPU_TRACES, GPU_TRACES

REPO = Path(__file__).resolve().parents[3]


def _head() -> str:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def test_open_on_empty_database_migrates_to_head(db_url):
    store = Store.open(db_url)
    try:
        with store.engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == _head()
            tables = set(inspect(conn).get_table_names())
        assert {"lease", "lease_event", "budget", "spend_interval", "setting", "cooldown"} <= tables
    finally:
        store.close()


def test_models_match_the_migrations(db_url):
    """Autogenerate against a migrated database finds nothing to do: no model change lacks a revision."""
    engine = make_engine(db_url)
    migrate(engine)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, metadata)
    engine.dispose()
    assert diff == []


def test_open_twice_is_a_no_op_and_keeps_data(db_url):
    s1 = Store.open(db_url)
    lease = s1.create_lease(pool="p", node_name="n1")
    s1.close()
    s2 = Store.open(db_url)
    assert s2.lease(lease.lease_id) == lease
    s2.close()


def test_sqlite_is_in_wal_mode_with_foreign_keys(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/deep/er/burstd.db")
    assert (tmp_path / "deep" / "er" / "burstd.db").exists()
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    store.close()


@pytest.mark.slow
def test_installed_package_migrates_without_the_source_tree(tmp_path):
    """Build the wheel, install it into a bare folder and open a database from there (no alembic.ini anywhere)."""
    src, wheels = tmp_path / "src", tmp_path / "wheels"
    src.mkdir()  # build from a copy so nothing (build/, *.egg-info) lands in the checkout
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "burstd", src / "burstd", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(wheels), str(src)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {r.stderr[-300:]}")
    (wheel,) = wheels.glob("burstd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "burstd/db/migrations/env.py" in names and "burstd/db/migrations/script.py.mako" in names
    assert any(n.startswith("burstd/db/migrations/versions/0001") for n in names)
    # simulate's spot traces travel in the wheel too: an installed burstctl needs no folder beside it (issue 27)
    for sub in (*CPU_TRACES, *GPU_TRACES):
        assert any(n.startswith(f"burstd/simulate/data/spot/skypilot_spot_traces/{sub}/") and n.endswith(".json")
                   for n in names), sub
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    code = (
        "import burstd.db.store as m, sys; assert m.__file__.startswith(sys.argv[1]), m.__file__;"
        "s = m.Store.open('sqlite:///' + sys.argv[2]); print(s.create_lease(pool='p', node_name='n').state)"
    )
    r = subprocess.run([sys.executable, "-c", code, str(site), str(tmp_path / "db.sqlite")], cwd=tmp_path,
                       env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "REQUESTED"


def test_processes_opening_an_empty_database_at_once_all_succeed(db_url):
    """Daemon, hooks and burstctl may start together on a fresh install: the migration runs under a lock."""
    import os

    code = "import sys; from burstd.db.store import Store; Store.open(sys.argv[1]).set_setting('p' + sys.argv[2], 'x')"
    procs = [subprocess.Popen([sys.executable, "-c", code, db_url, str(i)], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}) for i in range(4)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    store = Store.open(db_url)
    assert sorted(store.settings()) == ["p0", "p1", "p2", "p3"]
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1
    store.close()


def test_hot_queries_use_indexes_on_sqlite(tmp_path):
    """Live leases by state, the open lease of a node, spend by time: none of them scans a whole table."""
    from sqlalchemy import select

    from burstd.db import rows as st

    store = Store.open(f"sqlite:///{tmp_path}/b.db")
    queries = {
        "by state": select(st._lease).where(st._lease.c.state.in_(["READY", "BOOTING"])),
        "open lease of node": select(st._lease).where(st._lease.c.open_node == "n1"),
        "leases of node": select(st._lease).where(st._lease.c.node_name == "n1"),
        "spend by time": select(st._spend).where(st._spend.c.start >= 0.0, st._spend.c.start < 10.0),
        "events of lease": select(st._event).where(st._event.c.lease_id == "x").order_by(st._event.c.at),
    }
    with store.engine.connect() as conn:
        for name, q in queries.items():
            sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
            plan = " | ".join(r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
            assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (name, plan)
    store.close()


def test_a_database_at_an_older_revision_is_upgraded_with_its_data(db_url):
    from alembic import command
    from alembic.config import Config

    engine = make_engine(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    with engine.begin() as conn:
        assert "lease_allocation" not in inspect(conn).get_table_names()
        # a row written by the 0001 schema, through that schema's own columns
        old = sa.Table("lease", sa.MetaData(), autoload_with=conn)
        conn.execute(old.insert().values(
            id="a" * 32, pool="p", node_name="n1", open_node="n1", state="READY", market="spot",
            price_per_hour_micros=0, account="", job_ids=[], created_at=1.0, state_since=1.0, reason="",
            attempt=0, version=0))
    engine.dispose()
    store = Store.open(db_url)
    lease = store.lease("a" * 32)
    assert (lease.node_name, lease.state, lease.gang) == ("n1", "READY", None)
    with store.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == _head() == "0009"
    from burstd.domain.budget import Allocation

    store.record_allocations("a" * 32, [Allocation(1, 0.0)])
    store.close()


def test_upgrade_to_0004_moves_the_daemon_state_settings_into_their_tables(db_url):
    """Queued requests, protected pools, launch failures and the pause, kept as JSON settings before 0004, survive
    the upgrade as typed records, and the old settings are gone."""
    import json

    from alembic import command
    from alembic.config import Config

    engine = make_engine(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
    old = {
        "pending_intents": json.dumps([{"kind": "drain", "node": "c1", "reason": "maint", "at": 5.0}]),
        "pool_protection": json.dumps({"aws1": {"consecutive_failures": 3, "protected": True, "reason": "3 boots",
                                                "since": 7.0}}),
        "launch_failures": json.dumps({"aws1": {"reason": "no capacity", "kind": "capacity", "at": 6.0}}),
        "paused": "1",
        "unrelated": "kept",
    }
    with engine.begin() as conn:
        for k, v in old.items():
            conn.execute(sa.text("INSERT INTO setting (key, value, updated_at) VALUES (:k, :v, 0)"), {"k": k, "v": v})
    engine.dispose()
    store = Store.open(db_url)
    assert [(i.kind, i.node, i.reason, i.at) for i in store.intents()] == [("drain", "c1", "maint", 5.0)]
    h = store.pool_health()["aws1"]
    assert (h.consecutive_boot_failures, h.protected, h.protected_reason, h.protected_since) == (3, True, "3 boots", 7.0)
    assert (h.launch_failure_reason, h.launch_failure_kind, h.launch_failure_at) == ("no capacity", "capacity", 6.0)
    assert store.pause_state().paused is True
    assert store.settings() == {"unrelated": "kept"}
    store.close()


def test_the_head_read_from_the_migration_files_is_alembics_head():
    from burstd.db.engine import packaged_head

    assert packaged_head() == _head()


def test_a_database_at_head_opens_beside_a_writer_holding_the_lock(tmp_path):
    """A start finds the schema current by one read: it neither takes the write lock (the migration path begins
    ``BEGIN IMMEDIATE``, which would wait out the writer) nor imports Alembic."""
    import sqlite3

    url = f"sqlite:///{tmp_path}/burstd.db"
    Store.open(url).close()
    writer = sqlite3.connect(tmp_path / "burstd.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # a daemon in the middle of a write
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import sys; from burstd.db.store import Store\n"
             f"s = Store.open({url!r}); print(len(s.leases()), 'alembic' in sys.modules)"],
            capture_output=True, text=True, timeout=20, cwd=REPO)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["0", "False"]


def test_a_database_behind_head_still_migrates_through_alembic(tmp_path):
    url = f"sqlite:///{tmp_path}/burstd.db"
    Store.open(url).close()
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0008'")
        conn.exec_driver_sql("DROP TABLE job_progress")
    assert migrate(engine) == _head()
    with engine.connect() as conn:
        assert "job_progress" in inspect(conn).get_table_names()
    engine.dispose()
