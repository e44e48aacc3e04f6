"""A real PostgreSQL server for the tests, from Debian's packages (``postgresql-15``).

    def test_something(postgres_url):        # a fresh, empty database on a throwaway server
        store = Store.open(postgres_url)

``postgres_server`` (session scope) is ``burstd.testbed.pg.ThrowawayPostgres`` (the one implementation, shared
with ``burstctl demo --ha``): ``initdb`` and ``pg_ctl`` in a temporary folder, as the ``postgres`` user when the
tests run as root, listening only on a unix socket in that folder; stopped and removed at the end. Its
``crash()`` and ``restart()`` make an outage. ``postgres_url`` (function scope) creates one database per test and
drops it afterwards. Tests skip with the reason when the binaries are missing; ``BURSTD_PG_BIN`` names another
install.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from burstd.testbed.pg import PostgresError, ThrowawayPostgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[ThrowawayPostgres]:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 not installed (pip install burstd[postgres])")
    try:
        pg = ThrowawayPostgres().start()
    except PostgresError as exc:
        pytest.skip(str(exc))
    try:
        yield pg
    finally:
        pg.close()


def admin_connection(pg: ThrowawayPostgres):
    """An autocommit psycopg2 connection to the server's ``postgres`` database (to create and drop databases)."""
    import psycopg2

    conn = psycopg2.connect(host=str(pg.socket_dir), port=pg.port, user=pg.db_user, dbname="postgres")
    conn.autocommit = True
    return conn


@pytest.fixture
def postgres_url(postgres_server: ThrowawayPostgres) -> Iterator[str]:
    """A fresh empty database on the test server; dropped after the test."""
    name = "t_" + uuid.uuid4().hex[:12]
    admin = admin_connection(postgres_server)
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield postgres_server.url(name)
        admin.close()
        if not postgres_server.started:  # an outage test failed before it restarted the server
            postgres_server.restart()
        admin = admin_connection(postgres_server)  # an outage test may have restarted the server since
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()
