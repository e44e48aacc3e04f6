"""Spend accrual, once per cycle: who held each cloud node, and what every lease has cost so far.

    accrual = SpendAccrual(store)
    accrual.run(snapshot, now)      # record allocations from the snapshot, then ledger.accrue every lease

* Allocations: every running job whose nodes include a lease's node is recorded on that lease
  (``store.record_allocations``, keyed by lease/job/start); an allocation the snapshot no longer shows
  running there gets its end set to the time of this snapshot.
* Spend: ``burstd.policy.ledger.accrue`` from where the record ends (``lease.accrued_until``) to now for
  every open lease, and up to ``ended_at`` for leases that closed since the last run (all closed leases on the
  first run after a start, so a crash between close and accrual loses nothing). The ledger's intervals sum
  to the lease's cost exactly, whatever the chunking.

A failure here is logged and retried next cycle; it never stops the cycle.
"""

from __future__ import annotations

import dataclasses

from burstd.daemon.logging import ev, get_logger
from burstd.domain.budget import Allocation
from burstd.domain.lease import FINAL_STATES, OPEN_STATES
from burstd.domain.slurm import Snapshot

log = get_logger("spend")


def running_jobs_by_node(snapshot: Snapshot) -> dict[str, list]:
    out: dict[str, list] = {}
    for node, jobs in snapshot.jobs_by_node().items():
        running = [job for job in jobs if job.is_running]
        if running:
            out[node] = running
    return out


class SpendAccrual:
    """``interval_s``: open leases are accrued at most this often (``[budget] accrual_interval_s``); a lease
    that closed is accrued to its end at the next run. Allocations are written only when they change."""

    def __init__(self, store, interval_s: float = 0.0):
        self.store = store
        self.interval_s = interval_s
        self.last_run: float | None = None  # None: look at every closed lease once
        self.last_accrual: float | None = None
        self._open: dict[str, dict[tuple[int, float], Allocation]] = {}  # lease -> its allocations without end

    def _known_open(self, lease_id: str) -> dict[tuple[int, float], Allocation]:
        if lease_id not in self._open:  # first sight (or after a restart): what the store has
            self._open[lease_id] = {(a.job_id, a.start): a for a in self.store.allocations(lease_id)
                                    if a.end is None}
        return self._open[lease_id]

    def record_allocations(self, snapshot: Snapshot, leases, now: float) -> None:
        on_node = running_jobs_by_node(snapshot)
        live_ids = set()
        for lease in leases:
            if lease.launched_at is None:
                continue
            live_ids.add(lease.lease_id)
            known = self._known_open(lease.lease_id)
            current = {}
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

    def accrue(self, lease, now: float) -> int:
        from burstd.policy.ledger import accrue

        if lease.launched_at is None:
            return 0
        intervals = accrue(lease, now, prices=self.store.price_points(lease.lease_id),
                           allocations=self.store.allocations(lease.lease_id))
        return self.store.add_spend(intervals) if intervals else 0

    def run(self, snapshot: Snapshot | None, now: float) -> int:
        written = 0
        open_leases = self.store.leases(states=OPEN_STATES)
        if snapshot is not None:
            try:
                self.record_allocations(snapshot, open_leases, now)
            except Exception as exc:  # noqa: BLE001 - the next cycle tries again
                log.error("recording allocations failed",
                          extra=ev(error=str(exc), error_class=type(exc).__name__))
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
                written += self.accrue(lease, now)
            except Exception as exc:  # noqa: BLE001
                log.error("spend accrual failed", extra=ev(lease_id=lease.lease_id, error=str(exc),
                                                           error_class=type(exc).__name__))
        self.last_run = now
        return written
