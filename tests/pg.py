"""A real PostgreSQL server for the tests, from Debian's packages (``postgresql-15``).

    def test_something(postgres_url):        # a fresh, empty database on a throwaway server
        store = Store.open(postgres_url)

``postgres_server`` (session scope) runs ``initdb`` and ``pg_ctl`` in a temporary folder (as the ``postgres``
user when the tests run as root), listening only on a unix socket in that folder, and stops and removes it
at the end. ``postgres_url`` (function scope) creates one database per test and drops it afterwards.
Tests skip with the reason when the binaries are missing; set ``BURSTD_PG_BIN`` to use another install.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("BURSTD_PG_BIN", "/usr/lib/postgresql/15/bin"))
PORT = 5439  # only names the socket file inside our own folder; no TCP listener


@dataclass(frozen=True)
class PostgresServer:
    socket_dir: str
    port: int
    user: str
    control: tuple = ()  # (server user, pg_ctl, data dir, options, log): for outage tests

    def stop(self) -> None:
        """An outage: stop the server at once (``-m immediate``, like a crash); ``start()`` brings it back."""
        user, pg_ctl, data, _opts, _log = self.control
        _run_as(user, [pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"])

    def start(self) -> None:
        user, pg_ctl, data, opts, log = self.control
        r = _run_as(user, [pg_ctl, "-D", data, "-o", opts, "-l", log, "-w", "-t", "60", "start"])
        if r.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not restart: {r.stderr.strip()[-300:]}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"


def _run_as(user: str | None, argv: list[str], **kw) -> subprocess.CompletedProcess:
    extra = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        extra = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "env": {**os.environ, "HOME": pw.pw_dir}}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **extra, **kw)


def _server_user() -> str | None:
    """Who runs the server: ``postgres`` when we are root (initdb refuses root), else ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "__missing__"
    return "postgres"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    initdb, pg_ctl = PG_BIN / "initdb", PG_BIN / "pg_ctl"
    if not (initdb.exists() and pg_ctl.exists()):
        pytest.skip(f"PostgreSQL 15 not installed ({initdb} missing; apt-get install postgresql-15)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 not installed (pip install burstd[postgres])")
    user = _server_user()
    if user == "__missing__":
        pytest.skip("running as root but there is no 'postgres' user to run the server as")
    root = Path(tempfile.mkdtemp(prefix="burstd-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if user is not None:
        pw = pwd.getpwnam(user)
        for p in (root, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    db_user = user or pwd.getpwuid(os.geteuid()).pw_name
    started = False
    try:
        r = _run_as(user, [str(initdb), "-D", str(data), "-U", db_user, "--auth=trust", "-E", "UTF8",
                           "--no-sync", "--locale=C"])
        if r.returncode != 0:
            pytest.skip(f"initdb failed: {r.stderr.strip()[-500:]}")
        opts = f"-c listen_addresses='' -c unix_socket_directories={sock} -p {PORT} -c fsync=off -c max_connections=100"
        r = _run_as(user, [str(pg_ctl), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "-t", "60",
                           "start"])
        if r.returncode != 0:
            log = (root / "log").read_text(errors="replace")[-800:] if (root / "log").exists() else ""
            pytest.skip(f"PostgreSQL did not start: {r.stderr.strip()[-300:]} {log}")
        started = True
        yield PostgresServer(str(sock), PORT, db_user,
                             (user, str(pg_ctl), str(data), opts, str(root / "log")))
    finally:
        if started:
            _run_as(user, [str(pg_ctl), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh empty database on the test server; dropped after the test."""
    import psycopg2

    name = "t_" + uuid.uuid4().hex[:12]
    def connect():
        conn = psycopg2.connect(host=postgres_server.socket_dir, port=postgres_server.port,
                                user=postgres_server.user, dbname="postgres")
        conn.autocommit = True
        return conn

    admin = connect()
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield postgres_server.url(name)
        admin.close()
        admin = connect()  # an outage test may have restarted the server since
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()
