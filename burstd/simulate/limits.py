"""Per-user running limits of the on-prem model (``--user-max-running-jobs``, ``--user-max-running-cpus``).

The sites in the public traces ran schedulers with per-user limits (Maui/Moab ``MAXJOB`` / ``MAXPROC`` per
user, LoadLeveler's ``maxjobs`` a user, Slurm's QOS ``MaxJobsPerUser`` / ``MaxTRESPerUser``): a user may have
at most K jobs, or C CPUs, running at once, and further jobs of that user wait even while CPUs are free.

A job held by its user's limit is *blocked*, as Maui/Moab calls it: it leaves the eligible queue until one of
its user's jobs ends. So it neither stops first come first served nor takes the backfill reservation (the
shadow) that a CPU-blocked head job takes; the jobs behind it are scheduled as if it were not queued. A job
wider than C alone starts when its user runs nothing else on-prem (else it could never start). Only on-prem
jobs count: a burst job runs in the cloud partition, outside the site's limits. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UserLimits:
    max_jobs: int = 0  # running on-prem jobs a user; 0: no limit
    max_units: int = 0  # on-prem CPUs (GPUs on a GPU trace) a user holds at once; 0: no limit

    def __post_init__(self) -> None:
        for name, v in (("user_max_running_jobs", self.max_jobs), ("user_max_running_cpus", self.max_units)):
            if v < 0:
                raise ValueError(f"{name} {v}: give 0 (no limit) or more")

    @property
    def active(self) -> bool:
        return bool(self.max_jobs or self.max_units)

    def caps(self, unit: str = "CPUs") -> str:
        """The limits in words ("4 running jobs and 20 CPUs"); "" when off."""
        parts = ([f"{self.max_jobs} running jobs"] if self.max_jobs else []) + \
            ([f"{self.max_units} {unit}"] if self.max_units else [])
        return " and ".join(parts)


NO_LIMITS = UserLimits()  # the default: no per-user limit, the model as it was


class UserRunning:
    """What each user runs on-prem now, held against ``UserLimits``."""

    __slots__ = ("jobs", "max_jobs", "max_units", "units")

    def __init__(self, limits: UserLimits) -> None:
        self.max_jobs = limits.max_jobs
        self.max_units = limits.max_units
        self.jobs: dict[str, int] = {}
        self.units: dict[str, int] = {}

    def allows(self, user: str, units: int) -> bool:
        """Whether a job of ``user`` on ``units`` may start now (CPUs aside)."""
        if self.max_jobs and self.jobs.get(user, 0) >= self.max_jobs:
            return False
        if self.max_units:
            held = self.units.get(user, 0)
            if held and held + units > self.max_units:
                return False
        return True

    def start(self, user: str, units: int) -> None:
        self.jobs[user] = self.jobs.get(user, 0) + 1
        self.units[user] = self.units.get(user, 0) + units

    def end(self, user: str, units: int) -> None:
        left = self.jobs[user] - 1
        if left:
            self.jobs[user] = left
            self.units[user] -= units
        else:
            del self.jobs[user], self.units[user]
