"""The database engine as burstd needs it, its migrations, and ``StoreBase``: one connection per call, a write
transaction per method (SQLite: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``; PostgreSQL: pre-ping). The record
mixins (``ledger_records``, ``daemon_state``) and the ``Store`` build on it."""

from __future__ import annotations

import contextvars
import functools
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from burstd.domain.store_errors import LeaseNotFound, StoreBusy, StoreError
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


# A caller with an answer to give in time (a Slurm hook) bounds how long a write waits for the lock; past it the
# write fails with StoreBusy and nothing is recorded, instead of committing after the caller gave up.
_LOCK_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("burstd_lock_deadline", default=None)


@contextmanager
def lock_wait(seconds: float) -> Iterator[None]:
    """Writes in this block wait at most ``seconds`` (in all) for the database lock."""
    token = _LOCK_DEADLINE.set(time.monotonic() + max(0.0, seconds))
    try:
        yield
    finally:
        _LOCK_DEADLINE.reset(token)


def _lock_wait_ms() -> int | None:
    deadline = _LOCK_DEADLINE.get()
    return None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))


def _sqlite_begin(conn: Any) -> None:
    write = conn.get_execution_options().get("burstd_write")
    if write:
        conn.exec_driver_sql(f"PRAGMA busy_timeout = {_lock_wait_ms() or SQLITE_BUSY_TIMEOUT_MS}")
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def make_engine(url: str) -> Engine:
    """An engine set up the way burstd needs it (SQLite: WAL, busy timeout, foreign keys, folder created)."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        kwargs: dict[str, Any] = {}
        if u.database in (None, "", ":memory:"):
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        else:
            db = Path(u.database).expanduser()
            db.parent.mkdir(parents=True, exist_ok=True)
            try:  # spend, budgets and leases are the site's business: the file is the daemon's alone (0600)
                os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            kwargs = {"connect_args": {"check_same_thread": False}}
        engine = create_engine(u, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(u, pool_pre_ping=True)


def _alembic_config() -> Any:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


@functools.cache
def packaged_head() -> str:
    """The newest packaged revision, read from the migration files themselves: the one revision no other names
    as its ``down_revision`` (the chain is linear; ``test_store_migrations`` holds it to Alembic's own answer)."""
    revisions, downs = set(), set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        source = path.read_text()
        rev = re.search(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", source, re.M)
        down = re.search(r"^down_revision\s*=\s*['\"]([^'\"]+)['\"]", source, re.M)
        if rev:
            revisions.add(rev.group(1))
        if down:
            downs.add(down.group(1))
    heads = revisions - downs
    return heads.pop() if len(heads) == 1 else ""


def _current_revision(engine: Engine) -> str | None:
    """The database's revision by a plain read (None: no schema yet, or not readable this way)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except DBAPIError:  # no alembic_version table yet: a new database
        return None
    return rows[0] if len(rows) == 1 else None


def migrate(engine: Engine) -> str:
    """Run the packaged Alembic migrations to head, under a lock so two processes never race. Returns head.

    A database already at head (every start but the first after an upgrade) is seen with one read: no Alembic
    import and no write lock, so a daemon, a hook or ``burstctl`` starting beside a busy writer neither waits for
    it nor pays Alembic's start-up (about a fifth of a CPU-second, docs/testbed.md round nine)."""
    head = packaged_head()
    if head and _current_revision(engine) == head:
        return head
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = _alembic_config()
    with engine.execution_options(burstd_write=True).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK_KEY})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        return MigrationContext.configure(conn).get_current_revision() or ""



def schema_revisions(url: str, timeout_s: int = 5) -> tuple[str | None, str, frozenset[str]]:
    """The database's schema revision (None: no burstd schema in it), this burstd's head and every revision it
    knows, read without changing anything (``burstctl doctor``): no migration, no SQLite pragma, and no file made
    where none is (``FileNotFoundError``). Whatever the database says otherwise is raised as it is."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database in (None, "", ":memory:") or not Path(u.database).expanduser().is_file():
            raise FileNotFoundError(f"no SQLite database at {u.database or ':memory:'}")
        engine = create_engine(u)
    else:
        engine = create_engine(u, connect_args={"connect_timeout": timeout_s})
    script = ScriptDirectory.from_config(_alembic_config())
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
    return current, script.get_current_head() or "", frozenset(r.revision for r in script.walk_revisions())


def _is_lock_timeout(exc: OperationalError) -> bool:
    text = str(exc.orig).lower()
    code = getattr(exc.orig, "pgcode", None) or getattr(exc.orig, "sqlstate", None)
    return "database is locked" in text or code in ("55P03", "57014")  # lock_not_available, query_canceled


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

    @property
    def concurrent(self) -> bool:
        """Whether several threads may call the store at once (the launch workers): a connection per call on
        every engine but an in-memory SQLite, which shares one connection (and so one transaction)."""
        return not isinstance(self.engine.pool, StaticPool)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        try:
            with self._w.begin() as conn:
                wait = _lock_wait_ms()
                if wait is not None and conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {wait}")
                    conn.exec_driver_sql(f"SET LOCAL statement_timeout = {wait}")
                yield conn
        except OperationalError as exc:
            if _LOCK_DEADLINE.get() is None or not _is_lock_timeout(exc):
                raise
            raise StoreBusy("the database stayed locked by another writer past this call's deadline; "
                            "nothing was recorded by it") from None

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
