"""``db.engine.lock_wait`` on both databases (issue 9 item 9): a write that cannot get the lock within the
caller's deadline fails with StoreBusy and records nothing; once the lock is free the same write succeeds.
SQLite's path (busy_timeout) is also covered through real hooks in tests/unit/daemon/test_hooks_locked_db.py."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import create_engine, text

from burstd.db.engine import lock_wait
from burstd.domain.store_errors import StoreBusy
from burstd.db.store import Store

pytestmark = pytest.mark.postgres


def test_postgres_write_past_its_lock_deadline_is_store_busy_and_records_nothing(postgres_url):
    store = Store.open(postgres_url)
    holder = create_engine(postgres_url)
    locked, release = threading.Event(), threading.Event()

    def hold():
        with holder.begin() as conn:
            conn.execute(text("LOCK TABLE lease IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert locked.wait(10)
        t0 = time.monotonic()
        with pytest.raises(StoreBusy, match="nothing was recorded"), lock_wait(0.3):
            store.create_lease(pool="local", node_name="cloud1")
        assert time.monotonic() - t0 < 3
    finally:
        release.set()
        t.join()
        holder.dispose()
    assert store.lease_for_node("cloud1") is None
    with lock_wait(2.0):
        assert store.create_lease(pool="local", node_name="cloud1").node_name == "cloud1"
    store.close()
