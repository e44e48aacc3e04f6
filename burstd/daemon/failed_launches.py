"""Spot launches that found no capacity, counted per job, for ``decide(..., failed_spot_launches=...)``.

A job whose spot launch fails for capacity goes back on-prem without running, so Slurm's restart count (what
the escalation counted) may never move, and such a job waited for spot past its Uniform Progress line: the
Can't-Be-Late run missed 38 of 200 deadlines at 52 h so (docs/policy.md). The escalation now counts these
failures like preemptions (``burstd.policy.progress.setbacks``), and the replays count them the same way
(``burstd.simulate.cant_be_late``). Kept in memory: a daemon that restarts forgets them, and a job that then
falls behind its line waits for its next failed launch or preemption to leave spot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from burstd.domain.lease import Lease


class FailedSpotLaunches:
    """Job id -> spot launches for it that found no capacity. Written by the Executor's launch workers (under
    its lock), read by the cycle."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def record(self, leases: Iterable[Lease]) -> None:
        """One failed launch call (a lease, or a gang's leases) that found no capacity: each spot lease's jobs
        count one more failed spot launch (once each, however many of the gang's nodes they asked for)."""
        for jid in {j for lease in leases if lease.market == "spot" for j in lease.job_ids}:
            self._counts[jid] = self._counts.get(jid, 0) + 1

    def counts(self) -> Mapping[int, int]:
        return dict(self._counts)

    def prune(self, live_job_ids: Iterable[int]) -> None:
        """Forget the jobs Slurm no longer lists (they ended)."""
        live = set(live_job_ids)
        for jid in [j for j in self._counts if j not in live]:
            del self._counts[jid]
