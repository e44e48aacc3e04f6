"""A writer killed with SIGKILL at any point leaves the database consistent, and the next Store carries on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.db.store import Store
from burstd.domain.lease import ALLOWED, FINAL_STATES, LeaseState

WRITER = Path(__file__).with_name("crash_writer.py")
REPO = Path(__file__).resolve().parents[3]


def _spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(WRITER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _wait_for(proc: subprocess.Popen, marker: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == marker:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"writer exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
    raise AssertionError(f"writer never printed {marker}")


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()
    proc.stderr.close()


def assert_consistent(store: Store) -> None:
    """Every lease's state is where its event log leads, every logged move was legal, spend matches its marker,
    and no node has two open leases."""
    open_nodes: dict[str, str] = {}
    for lease in store.leases():
        events = store.events(lease.lease_id)
        assert events and events[0].from_state is None and events[0].to_state == LeaseState.REQUESTED
        state = LeaseState.REQUESTED
        for e in events[1:]:
            assert e.from_state == state, (lease, e)
            assert e.to_state == state or e.to_state in ALLOWED[state], (lease, e)
            state = e.to_state
        assert state == lease.state, lease
        spend = store.spend_intervals(lease.lease_id)
        assert lease.accrued_until == (max(iv.end for iv in spend) if spend else None), lease
        if lease.state not in FINAL_STATES:
            assert lease.node_name not in open_nodes, (lease, open_nodes)
            open_nodes[lease.node_name] = lease.lease_id
            assert store.lease_for_node(lease.node_name).lease_id == lease.lease_id


def test_kill_inside_a_transition_rolls_it_back(db_url):
    store = Store.open(db_url)
    lease = store.create_lease(pool="p", node_name="n1")
    store.transition(lease.lease_id, LeaseState.LAUNCHING, "go")
    proc = _spawn("hang-in-transition", db_url, lease.lease_id)
    try:
        _wait_for(proc, "IN_TXN")
    finally:
        _kill(proc)
    after = Store.open(db_url)
    seen = after.lease(lease.lease_id)
    assert seen.state == LeaseState.LAUNCHING and seen.instance_id is None
    assert [e.to_state for e in after.events(lease.lease_id)] == [LeaseState.REQUESTED, LeaseState.LAUNCHING]
    # the killed writer's lock is gone: the next writer moves the lease at once
    moved = after.transition(lease.lease_id, LeaseState.BOOTING, "retry after crash", instance_id="i-real")
    assert moved.state == LeaseState.BOOTING and moved.instance_id == "i-real"
    if after.dialect == "sqlite":
        with after.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    assert_consistent(after)
    after.close()
    store.close()


@pytest.mark.slow
def test_writer_killed_at_random_points_leaves_a_consistent_database(db_url):
    rng = random.Random(1234)
    Store.open(db_url).close()
    writes = 0
    for _ in range(12):
        proc = _spawn("churn", db_url)
        try:
            _wait_for(proc, "WORKING")
            time.sleep(rng.uniform(0.0, 0.4))
        finally:
            _kill(proc)
        store = Store.open(db_url)
        assert_consistent(store)
        writes = len(store.events())
        store.close()
    # the writers really wrote (and later ones cleaned up after earlier ones)
    assert writes > 50
