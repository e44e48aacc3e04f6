"""Persistence: SQLModel tables, Alembic migrations, and the ``Store`` the daemon uses."""
