"""The database engine as burstd needs it, its migrations, and ``StoreBase``: one connection per call, a write
transaction per method (SQLite: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``; PostgreSQL: pre-ping). The record
mixins (``ledger_records``, ``daemon_state``) and the ``Store`` build on it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, select
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from burstd.db.errors import LeaseNotFound, StoreError
from burstd.db.rows import _lease
from burstd.domain.lease import LeaseState

MIGRATIONS = Path(__file__).resolve().with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 30_000
_MIGRATE_LOCK_KEY = 0x6275727374  # "burst": PostgreSQL advisory lock held while migrating


def _now(at: float | None) -> float:
    return time.time() if at is None else float(at)



def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_begin)
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys = ON")
    mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode and mode[0].lower() not in ("wal", "memory"):
        raise StoreError(f"SQLite would not switch to WAL mode (got {mode[0]!r}); is the file on a network share?")
    cur.execute("PRAGMA synchronous = FULL")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("burstd_write") else "BEGIN")


def make_engine(url: str) -> Engine:
    """An engine set up the way burstd needs it (SQLite: WAL, busy timeout, foreign keys, folder created)."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        kwargs: dict[str, Any] = {}
        if u.database in (None, "", ":memory:"):
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        else:
            Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs = {"connect_args": {"check_same_thread": False}}
        engine = create_engine(u, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(u, pool_pre_ping=True)


def migrate(engine: Engine) -> str:
    """Run the packaged Alembic migrations to head, under a lock so two processes never race. Returns head."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from alembic.runtime.migration import MigrationContext

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.execution_options(burstd_write=True).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK_KEY})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        return MigrationContext.configure(conn).get_current_revision() or ""



class StoreBase:
    """The engine and the transaction helpers every record mixin uses."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._w = engine.execution_options(burstd_write=True)

    def close(self) -> None:
        self.engine.dispose()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self._w.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self.engine.connect() as conn:
            yield conn

    def _upsert(self, conn: Any, table: Any, keys: list[str], values: dict[str, Any]) -> None:
        from sqlalchemy.dialects import postgresql, sqlite

        dialect: Any = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(table).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=keys, set_={k: v for k, v in values.items() if k not in keys}
        )
        conn.execute(stmt)

    def _state_in(self, conn: Any, lease_id: str) -> LeaseState:
        state = conn.execute(select(_lease.c.state).where(_lease.c.id == lease_id)).scalar()
        if state is None:
            raise LeaseNotFound(f"no lease {lease_id!r}")
        return LeaseState(state)
