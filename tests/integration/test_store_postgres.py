"""burstd's Store on a real PostgreSQL 15 server, used by several processes at once, as a site running the
daemon, burstctl and the hooks against one database would."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from burstd.db.store import Store
from burstd.domain.lease import LeaseState as S
from burstd.domain.ledger import Allocation, lease_cost

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parents[2]

RACE = """
import sys
from burstd.db.store import NodeBusy, Store
s = Store.open(sys.argv[1])
try:
    lease = s.create_lease(pool="aws-a", node_name="aws-a-1", reason=f"process {sys.argv[2]}")
    print("WON", lease.lease_id, sys.argv[2])
except NodeBusy as e:
    print("BUSY", e.lease.lease_id)
"""


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_processes_opening_an_empty_database_together_migrate_it_once(postgres_url):
    procs = [_python(RACE, postgres_url, str(i)) for i in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-800:] for o in outs]
    lines = [o[0].split() for o in outs]
    winners = [w for w in lines if w[0] == "WON"]
    assert len(winners) == 1, lines
    # every loser was told which lease holds the node
    assert all(w[1] == winners[0][1] for w in lines)
    store = Store.open(postgres_url)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1
    assert [(x.lease_id, x.reason) for x in store.leases()] == [(winners[0][1], f"process {winners[0][2]}")]
    store.close()


def test_a_launch_storm_from_many_writers_keeps_one_open_lease_per_node(postgres_url):
    Store.open(postgres_url).close()
    nodes = [f"aws-a-{i}" for i in range(1, 9)]

    def writer(k: int) -> list[str]:
        s = Store.open(postgres_url, migrate_to_head=False)
        won = []
        try:
            for n in nodes:
                try:
                    lease = s.create_lease(pool="aws-a", node_name=n, reason=f"writer {k}")
                except Exception as exc:  # NodeBusy: another writer took the node
                    assert type(exc).__name__ == "NodeBusy", exc
                    continue
                s.transition(lease.lease_id, S.LAUNCHING, "launch", expect=S.REQUESTED)
                won.append(n)
        finally:
            s.close()
        return won

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(writer, range(8)))
    assert sorted(n for r in results for n in r) == sorted(nodes)
    store = Store.open(postgres_url)
    live = store.leases(states=[S.LAUNCHING])
    assert sorted(x.node_name for x in live) == sorted(nodes)
    assert store.leases(states=[S.REQUESTED]) == []
    store.close()


def test_budget_set_by_burstctl_is_seen_by_the_daemon_and_spend_adds_up(postgres_url):
    daemon = Store.open(postgres_url)
    ctl = Store.open(postgres_url)
    ctl.set_budget("chem", "25.50", period="day")
    lease = daemon.create_lease(pool="aws-a", node_name="aws-a-1", account="chem",
                                price_per_hour_micros=3_000_000)
    t0 = 1_773_144_000.0
    daemon.transition(lease.lease_id, S.LAUNCHING, "launch", at=t0)
    daemon.transition(lease.lease_id, S.BOOTING, "up", at=t0 + 30, launched_at=t0 + 5.5, instance_id="i-1")
    daemon.record_allocations(lease.lease_id, [Allocation(42, t0 + 90, t0 + 5000, "chem", "ann")])
    fence = daemon.claim_leadership("head1", 60).fence
    for now in (t0 + 60, t0 + 3000, t0 + 7000):  # the daemon's one accrual path, under its fence
        daemon.accrue_spend(lease.lease_id, now, fence=fence)
    book = ctl.budget_book("day", t0 + 7000)
    total = lease_cost(daemon.lease(lease.lease_id), t0 + 7000)
    assert book.accounts["chem"].limit_micros == 25_500_000
    assert book.accounts["chem"].spent_micros == total == book.site_spent_micros
    assert ctl.spend("user") == {"ann": ctl.spend("job")["42"], "(overhead)": total - ctl.spend("job")["42"]}
    daemon.close()
    ctl.close()
