"""What one cycle of policy decides: pure data, applied by the daemon.

``decide()`` (``burstd.policy``) returns a ``Decisions``; the daemon turns each item into Slurm calls
(add/remove a cloud partition on a pending job) and lease intents (pre-warm, release). Deciding and
doing stay apart so the decision table can be tested and replayed on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MakeEligible:
    """Add ``partition`` (a cloud pool's partition) to a pending job's partition list."""

    job_id: int
    pool: str
    partition: str
    market: str = "spot"  # "spot" or "on-demand": which pool flavour the escalation chose
    expected_cost_micros: int = 0


@dataclass(frozen=True, slots=True)
class RevokeEligible:
    """Take ``partition`` back off a still-pending job (no longer worth it, or no money left)."""

    job_id: int
    partition: str


@dataclass(frozen=True, slots=True)
class Prewarm:
    """Power up ``count`` idle nodes of ``pool`` ahead of demand."""

    pool: str
    count: int


@dataclass(frozen=True, slots=True)
class Release:
    """Power down an idle cloud node early (e.g. budget exhausted, pool paused)."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job bursts or does not: what ``burstctl explain JOBID`` prints."""

    job_id: int
    burst: bool
    pool: str | None
    reason: str  # one sentence with the figures that decided it


@dataclass(slots=True)
class Decisions:
    eligible: list[MakeEligible] = field(default_factory=list)
    revoke: list[RevokeEligible] = field(default_factory=list)
    prewarm: list[Prewarm] = field(default_factory=list)
    release: list[Release] = field(default_factory=list)
    explanations: dict[int, Explanation] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.eligible or self.revoke or self.prewarm or self.release)
