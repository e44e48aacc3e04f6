"""A writer process for the crash tests (run as ``python crash_writer.py MODE URL``; killed with SIGKILL).

mode "hang-in-transition": start a real ``Store.transition`` and stop inside its transaction, after the
lease UPDATE and before the event INSERT, printing ``IN_TXN``.
mode "churn": first close every open lease left by an earlier (killed) writer, then create leases and walk
them through their life with spend, forever, printing ``WORKING`` once.
"""

from __future__ import annotations

import itertools
import sys
import time
import uuid

import burstd.db.store as store_mod
from burstd.domain.budget import SpendInterval
from burstd.domain.lease import LeaseState as S


def hang_in_transition(url: str, lease_id: str) -> None:
    store = store_mod.Store.open(url, migrate_to_head=False)
    real_insert = store_mod.insert

    def insert_then_hang(table):
        if table is store_mod._event:
            print("IN_TXN", flush=True)
            time.sleep(600)
        return real_insert(table)

    store_mod.insert = insert_then_hang
    store.transition(lease_id, S.BOOTING, "never committed", instance_id="i-ghost")


def close_leftovers(store: store_mod.Store) -> None:
    for lease in store.leases():
        if lease.state in (S.TERMINATED, S.REFUSED):
            continue
        if lease.state == S.REQUESTED:
            store.transition(lease.lease_id, S.REFUSED, "left over by a killed writer")
            continue
        if lease.state != S.TERMINATING:
            store.transition(lease.lease_id, S.TERMINATING, "left over by a killed writer")
        store.transition(lease.lease_id, S.TERMINATED, "left over by a killed writer")


def churn(url: str) -> None:
    store = store_mod.Store.open(url, migrate_to_head=False)
    close_leftovers(store)
    print("WORKING", flush=True)
    tag = uuid.uuid4().hex[:6]
    for i in itertools.count():
        lease = store.create_lease(pool="p", node_name=f"n{i % 3}", job_ids=(i,), account="chem",
                                   price_per_hour_micros=3_600_000, reason=f"{tag} {i}")
        lid = lease.lease_id
        store.transition(lid, S.LAUNCHING, "launch")
        store.transition(lid, S.BOOTING, "up", instance_id=f"i-{tag}-{i}", launched_at=time.time())
        store.transition(lid, S.READY, "registered")
        t = time.time()
        store.add_spend([SpendInterval(lid, "p", "chem", t, t + 1, 3_600_000, 1000, i, "ann"),
                         SpendInterval(lid, "p", "chem", t + 1, t + 2, 3_600_000, 1000, None, None)])
        store.note(lid, "heartbeat")
        store.transition(lid, S.TERMINATING, "idle")
        store.transition(lid, S.TERMINATED, "gone")


if __name__ == "__main__":
    mode, url = sys.argv[1], sys.argv[2]
    if mode == "hang-in-transition":
        hang_in_transition(url, sys.argv[3])
    else:
        churn(url)
