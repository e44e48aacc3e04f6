"""Spend accrual, once per cycle: who held each cloud node, and what every lease has cost so far.

    accrual = SpendAccrual(store)
    accrual.run(snapshot, now, fence=fence)   # record allocations from the snapshot, then accrue every lease

* Allocations: every running job whose nodes include a lease's node is recorded on that lease
  (``store.record_allocations``, keyed by lease/job/start); an allocation the snapshot no longer shows
  running there gets its end set to the time of this snapshot.
* Spend: ``SpendLedger.accrue_spend`` (``Store.accrue_spend``, the one accrual path: a transaction that
  reads the lease, its prices and allocations, runs ``burstd.domain.ledger.accrue`` and records the result,
  under the leader's fence) from where the record ends (``lease.accrued_until``) to now for every open lease,
  and up to ``ended_at`` for leases that closed since the last run (all closed leases on the first run after a
  start, so a crash between close and accrual loses nothing). The ledger's intervals sum to the lease's cost
  exactly, whatever the chunking.

A failure here is logged and retried next cycle; it never stops the cycle (a deposed leader's ``Fenced`` does,
as everywhere).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from burstd.daemon.cycle_errors import step_failed
from burstd.daemon.logging import get_logger
from burstd.daemon.metrics import Metrics
from burstd.daemon.ports import SpendLedger
from burstd.domain.leadership import Fence, Fenced
from burstd.domain.budget import Allocation
from burstd.domain.lease import FINAL_STATES, OPEN_STATES, Lease
from burstd.domain.slurm import Job, Snapshot

log = get_logger("spend")


def running_jobs_by_node(snapshot: Snapshot) -> dict[str, list[Job]]:
    out: dict[str, list[Job]] = {}
    for node, jobs in snapshot.jobs_by_node().items():
        running = [job for job in jobs if job.is_running]
        if running:
            out[node] = running
    return out


class SpendAccrual:
    """``interval_s``: open leases are accrued at most this often (``[budget] accrual_interval_s``); a lease
    that closed is accrued to its end at the next run. Allocations are written only when they change."""

    def __init__(self, store: SpendLedger, interval_s: float = 0.0, metrics: Metrics | None = None):
        self.store = store
        self.interval_s = interval_s
        self.metrics = metrics
        self.last_run: float | None = None  # None: look at every closed lease once
        self.last_accrual: float | None = None
        self._open: dict[str, dict[tuple[int, float], Allocation]] = {}  # lease -> its allocations without end

    def _known_open(self, lease_id: str) -> dict[tuple[int, float], Allocation]:
        if lease_id not in self._open:  # first sight (or after a restart): what the store has
            self._open[lease_id] = {(a.job_id, a.start): a for a in self.store.allocations(lease_id)
                                    if a.end is None}
        return self._open[lease_id]

    def record_allocations(self, snapshot: Snapshot, leases: Sequence[Lease], now: float) -> None:
        on_node = running_jobs_by_node(snapshot)
        live_ids = set()
        for lease in leases:
            if lease.launched_at is None:
                continue
            live_ids.add(lease.lease_id)
            known = self._known_open(lease.lease_id)
            current: dict[tuple[int, float], Allocation] = {}
            for job in on_node.get(lease.node_name, []):
                a = Allocation(job.job_id, float(job.start_time or now), None, job.account, job.user or None,
                               max(1, int(job.cpus or 1)))
                current[(a.job_id, a.start)] = a
            rows = [a for k, a in current.items() if k not in known]
            rows += [dataclasses.replace(a, end=max(a.start, now)) for k, a in known.items() if k not in current]
            if rows:
                self.store.record_allocations(lease.lease_id, rows)
            self._open[lease.lease_id] = current
        for lease_id in set(self._open) - live_ids:
            del self._open[lease_id]

    def run(self, snapshot: Snapshot | None, now: float, *, fence: Fence | None = None) -> list[str]:
        """Record this snapshot's allocations, then accrue every lease that is due, each in its own transaction
        (``accrue_spend``). Returns what failed (for the cycle's report); a failure is retried next cycle. A
        deposed leader's write raises ``Fenced``: the cycle ends there, as for any fenced write."""
        errors: list[str] = []
        open_leases = self.store.leases(states=OPEN_STATES)
        if snapshot is not None:
            try:
                self.record_allocations(snapshot, open_leases, now)
            except Exception as exc:  # noqa: BLE001 - the next cycle tries again
                errors.append(f"allocations: {exc}")
                step_failed(log, "recording allocations failed", exc, self.metrics)
        since = None if self.last_run is None else self.last_run - 60.0
        closed = self.store.leases(states=FINAL_STATES, since=since)
        due = self.last_accrual is None or now - self.last_accrual >= self.interval_s
        if due:
            self.last_accrual = now
        for lease in [*(open_leases if due else ()), *closed]:
            if lease.launched_at is None:
                continue
            done = lease.ended_at is not None and (lease.accrued_until or float("-inf")) >= lease.ended_at
            if done:
                continue
            try:
                self.store.accrue_spend(lease.lease_id, now, fence=fence)
            except Fenced:
                raise
            except Exception as exc:  # noqa: BLE001 - the next cycle tries again
                errors.append(f"spend {lease.lease_id}: {exc}")
                step_failed(log, "spend accrual failed", exc, self.metrics, lease_id=lease.lease_id)
        self.last_run = now
        return errors
