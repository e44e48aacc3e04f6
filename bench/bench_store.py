#!/usr/bin/env python3
"""Store and ledger benchmark: the durable-intent path and spend queries against bare SQL in the same run.

    python bench/bench_store.py                          # SQLite file in a temp dir
    python bench/bench_store.py --n 500 --intervals 200000
    python bench/bench_store.py --url postgresql+psycopg2://me@/bench?host=/tmp/pg   # an empty database

Measured, interleaved, same database engine and disk:

* intent   : ``create_lease`` + ``transition(LAUNCHING)`` (what must be durable before a cloud call), against
             the bare driver doing the same two INSERTs + UPDATE + INSERT in two committed transactions
             (SQLite: same pragmas, WAL, synchronous=FULL). Per-call p50/p99 and the ratio.
* spend    : ``spend(by="account")`` over ``--intervals`` ledger rows, against the bare ``SELECT account,
             sum(cost_micros) ... GROUP BY account``.
* ledger   : ``accrue`` of a 30-day lease of an 8-slot node running 1,000 jobs back to back, with 50 price
             changes (intervals per second), and of the same lease with 10x the jobs (growth; near 10x = linear).

Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402

from burstd.db.store import Store  # noqa: E402
from burstd.domain.budget import Allocation, PricePoint, SpendInterval  # noqa: E402
from burstd.domain.lease import Lease, LeaseState  # noqa: E402
from burstd.domain.ledger import accrue  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bare_intent(conn, i: int) -> None:
    lid = uuid.uuid4().hex
    now = time.time()
    with conn.begin():
        conn.execute(text(
            "INSERT INTO lease (id, pool, node_name, open_node, state, market, price_per_hour_micros, account, job_ids,"
            " created_at, state_since, reason, attempt, version) VALUES (:id, 'p', :n, :n, 'REQUESTED', 'spot', 1,"
            " 'chem', '[1]', :t, :t, 'r', 0, 0)"), {"id": lid, "n": f"bare{i}", "t": now})
        conn.execute(text("INSERT INTO lease_event (lease_id, at, to_state, reason, extra) VALUES "
                          "(:id, :t, 'REQUESTED', 'r', '{}')"), {"id": lid, "t": now})
    with conn.begin():
        conn.execute(text("SELECT state FROM lease WHERE id = :id"), {"id": lid}).scalar()
        conn.execute(text("UPDATE lease SET state='LAUNCHING', state_since=:t, version=version+1 WHERE id=:id AND "
                          "state='REQUESTED'"), {"id": lid, "t": now})
        conn.execute(text("INSERT INTO lease_event (lease_id, at, from_state, to_state, reason, extra) VALUES "
                          "(:id, :t, 'REQUESTED', 'LAUNCHING', 'go', '{}')"), {"id": lid, "t": now})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="database URL (default: a SQLite file in a temp dir)")
    ap.add_argument("--n", type=int, default=200, help="intent calls per side")
    ap.add_argument("--intervals", type=int, default=100_000, help="ledger rows for the spend query")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="burstd-bench-")
    url = args.url or f"sqlite:///{tmp.name}/bench.db"
    store = Store.open(url)
    print(f"database: {store.dialect}  ({url if args.url else 'temp SQLite file'})")

    # ---- intent ----
    ours, bare = [], []
    with store._w.connect() as conn:  # the same engine set-up (pragmas, BEGIN IMMEDIATE) for the bare side
        for i in range(args.n):
            t = time.perf_counter()
            lease = store.create_lease(pool="p", node_name=f"n{i}", job_ids=(i,), account="chem",
                                       price_per_hour_micros=1, reason="r")
            store.transition(lease.lease_id, LeaseState.LAUNCHING, "go")
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            bare_intent(conn, i)
            bare.append(time.perf_counter() - t)
    for name, xs in (("store", ours), ("bare SQL", bare)):
        print(f"intent  {name:9s} p50 {pct(xs, 50) * 1e3:7.2f} ms   p99 {pct(xs, 99) * 1e3:7.2f} ms")
    print(f"intent  ratio store/bare: p50 {pct(ours, 50) / pct(bare, 50):.2f}x  p99 {pct(ours, 99) / pct(bare, 99):.2f}x")

    # ---- spend query ----
    rng = random.Random(1)
    lease = store.create_lease(pool="p", node_name="spender", account="chem")
    accounts = [f"acct{i}" for i in range(50)]
    batch = [SpendInterval(lease.lease_id, "p", rng.choice(accounts), float(i), float(i + 1), 1, rng.randint(0, 9999),
                           rng.choice([None, 1, 2, 3]), "ann") for i in range(args.intervals)]
    store.add_spend(batch)
    q_ours, q_bare = [], []
    with store.engine.connect() as conn:
        for _ in range(5):
            t = time.perf_counter()
            ours_res = store.spend("account")
            q_ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            bare_res = dict(conn.execute(text("SELECT account, sum(cost_micros) FROM spend_interval GROUP BY account")).all())
            q_bare.append(time.perf_counter() - t)
            conn.rollback()
    assert sum(ours_res.values()) == sum(bare_res.values())
    mo, mb = statistics.median(q_ours), statistics.median(q_bare)
    print(f"spend   {args.intervals} rows: store {mo * 1e3:.1f} ms, bare {mb * 1e3:.1f} ms, ratio {mo / mb:.2f}x")

    # ---- ledger ----
    t0 = 1_773_144_000.0
    month = 30 * 86400

    def scenario(jobs: int) -> tuple[Lease, list[PricePoint], list[Allocation]]:
        lease = Lease("L", "p", "n", LeaseState.TERMINATED, price_per_hour_micros=1_000_000, launched_at=t0,
                      ended_at=t0 + month, account="chem")
        prices = [PricePoint(t0 + rng.uniform(0, month), rng.randint(100_000, 5_000_000)) for _ in range(50)]
        allocs = []  # a node with 8 slots; in each slot jobs run back to back with idle gaps
        slots = 8
        per_slot = jobs // slots
        for slot in range(slots):
            t = t0
            mean = month / per_slot
            for j in range(per_slot):
                t += rng.uniform(0, mean * 0.2)
                d = rng.uniform(0.3, 1.3) * mean
                allocs.append(Allocation(slot * per_slot + j, t, t + d, "chem", "ann", rng.randint(1, 8)))
                t += d
        return lease, prices, allocs

    rates = {}
    for jobs in (1000, 10_000):
        lease, prices, allocs = scenario(jobs)
        t = time.perf_counter()
        ivs = accrue(lease, t0 + month, prices=prices, allocations=allocs)
        dt = time.perf_counter() - t
        rates[jobs] = dt
        print(f"ledger  30-day lease, {jobs:6d} jobs: {len(ivs):7d} intervals in {dt:.2f} s "
              f"({len(ivs) / dt:,.0f} intervals/s)")
    print(f"ledger  growth 10x jobs: {rates[10_000] / rates[1000]:.1f}x time")
    store.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
