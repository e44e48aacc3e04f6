"""Store tests run on both databases: a SQLite file and (marked ``postgres``) a real PostgreSQL 15."""

from __future__ import annotations

import pytest

from burstd.db.store import Store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/state/burstd.db"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(db_url):
    s = Store.open(db_url)
    yield s
    s.close()
