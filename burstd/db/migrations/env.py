"""Alembic environment for burstd. ``burstd.db.store.Store.open`` runs it (no alembic.ini needed):
it passes an open connection in ``config.attributes["connection"]``. For hand use::

    alembic -x url=sqlite:////var/lib/burstd/burstd.db -c /dev/null upgrade head   # or burstd.db.store.migrate(url)
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from burstd.db.models import metadata

config = context.config


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things in place
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database: pass -x url=... (or use burstd.db.store.migrate)")
    engine = create_engine(url)
    with engine.connect() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("burstd migrations run online only")
run_migrations_online()
