"""Spot launches that found no capacity, counted per job, for ``decide(..., failed_spot_launches=...)``.

A job whose spot launch fails for capacity goes back on-prem without running, so Slurm's restart count (what
the escalation counted) may never move, and such a job waited for spot past its Uniform Progress line: the
Can't-Be-Late run missed 38 of 200 deadlines at 52 h so (docs/policy.md). The escalation now counts these
failures like preemptions (``burstd.policy.progress.setbacks``), and the replays count them the same way
(``burstd.simulate.cant_be_late``). Counted in memory, and rebuilt from the store whenever a daemon starts
leading (a restart, a standby taking over): each such failure left its leases FAILED (then TERMINATED) with the
reason ``launch_failure_reason`` wrote, one launch call a lease or a gang.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from burstd.domain.lease import Lease, LeaseState
from burstd.providers.base import ErrorKind

#: How far back the store is read when the counts are rebuilt: a job pending longer has other troubles.
SEED_HORIZON_S = 14 * 86400


def launch_failure_reason(kind: ErrorKind, message: str) -> str:
    """A lease's reason when its launch call failed for good (capacity, quota, config): what ``seed`` reads."""
    return f"launch failed ({kind}): {message}"


#: Where such a lease ends: FAILED, then TERMINATED once closed (``planning.plan_leases`` keeps its reason).
SEED_STATES = (LeaseState.FAILED, LeaseState.TERMINATED)


def _no_capacity(lease: Lease) -> bool:
    return (lease.state in SEED_STATES and lease.market == "spot"
            and lease.reason.startswith(launch_failure_reason(ErrorKind.CAPACITY, "")))


class FailedSpotLaunches:
    """Job id -> spot launches for it that found no capacity. Written by the Executor's launch workers (under
    its lock), read by the cycle."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.seeded = False  # rebuilt from the store since this daemon started leading

    def seed(self, leases: Iterable[Lease]) -> None:
        """Rebuild the counts from the store's ended leases: every spot launch call that found no capacity, each job
        counted once a call (a gang's leases share their call)."""
        calls: dict[int, set[str]] = {}
        for lease in leases:
            if _no_capacity(lease):
                for jid in lease.job_ids:
                    calls.setdefault(jid, set()).add(lease.gang or lease.lease_id)
        self._counts = {jid: len(c) for jid, c in calls.items()}
        self.seeded = True

    def unseed(self) -> None:
        """Not leading (a standby, a deposed leader): what it counts goes stale; rebuilt when it leads again."""
        self.seeded = False

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
