"""What one cycle of policy decides: pure data, applied by the daemon.

``decide()`` (``burstd.policy``) returns a ``Decisions``; the daemon turns each item into Slurm calls
(add/remove a cloud partition on a pending job) and lease intents (pre-warm, release). Deciding and
doing stay apart so the decision table can be tested and replayed on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from burstd.domain.data import DataMove


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


class ExplanationMap(MutableMapping[int, Explanation]):
    """``job_id -> Explanation`` that renders each sentence only when it is read.

    ``decide()`` explains every pending job, but over a 100,000-job queue formatting 100,000 sentences
    costs more than deciding; nearly all are never read. A producer stores a compact record with
    ``put(job_id, render, *args)`` (a hot loop may write ``records[job_id] = (render, *args)`` itself);
    reading ``m[job_id]`` (or iterating values/items) calls ``render(*args)`` once and keeps the
    ``Explanation``. Behaves like a dict otherwise.
    """

    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: dict[int, Any] = {}

    @property
    def records(self) -> dict[int, Any]:
        """The backing dict: ``Explanation``s and not-yet-rendered ``(render, *args)`` tuples."""
        return self._d

    def put(self, job_id: int, render: Callable[..., Explanation], *args: Any) -> None:
        self._d[job_id] = (render, *args)

    def __getitem__(self, job_id: int) -> Explanation:
        v = self._d[job_id]
        if type(v) is tuple:
            v = self._d[job_id] = v[0](*v[1:])
        return v

    def __setitem__(self, job_id: int, value: Explanation) -> None:
        self._d[job_id] = value

    def __delitem__(self, job_id: int) -> None:
        del self._d[job_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._d

    def __repr__(self) -> str:
        return f"ExplanationMap({len(self._d)} jobs)"


@dataclass(slots=True)
class Decisions:
    eligible: list[MakeEligible] = field(default_factory=list)
    revoke: list[RevokeEligible] = field(default_factory=list)
    prewarm: list[Prewarm] = field(default_factory=list)
    release: list[Release] = field(default_factory=list)
    # job -> (pool, market) for every job bursting this cycle, newly eligible or kept: a kept job's market can
    # change (escalated to on-demand after preemptions) while its partition stays, so no MakeEligible says so
    markets: dict[int, tuple[str, str]] = field(default_factory=dict)
    explanations: MutableMapping[int, Explanation] = field(default_factory=dict)  # or an ExplanationMap
    # job -> what bursting it moves (bytes, stage-in time, cost): for the transfer engine and the ledger
    data_moves: dict[int, DataMove] = field(default_factory=dict)
    kept_home_for_data: list[int] = field(default_factory=list)  # never-leave, or moving its data is not worth it

    def is_empty(self) -> bool:
        return not (self.eligible or self.revoke or self.prewarm or self.release)
