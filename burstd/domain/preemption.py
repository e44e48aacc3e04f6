"""Spot interruption notices as data, and the Slurm drain reason that carries them.

The node agent drains a node with ``preemption_reason(notice)``; the daemon reads node reasons back with
``parse_preemption_reason`` to learn, server-side, that a node is being reclaimed and when. Pure code.

    >>> n = Notice(kind="interruption", action="terminate", deadline=1763769600.0, source="aws")
    >>> preemption_reason(n)
    'burstd-preempt: terminate at 2025-11-22T00:00:00Z (aws)'
    >>> parse_preemption_reason(preemption_reason(n)).deadline
    1763769600.0
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

REASON_PREFIX = "burstd-preempt"
REBALANCE_PREFIX = "burstd-rebalance"

NoticeKind = Literal["interruption", "rebalance"]


@dataclass(frozen=True, slots=True)
class Notice:
    """One warning from the cloud: the instance will be reclaimed (``interruption``) at ``deadline``, or is
    at elevated risk (``rebalance``; ``deadline`` is then the time the recommendation was issued)."""

    kind: NoticeKind
    action: str  # "terminate" | "stop" | "hibernate" | "rebalance"
    deadline: float  # Unix seconds
    source: str  # "aws" | "gcp" | "local"

    @property
    def key(self) -> tuple[str, str, float]:
        """Identity of a notice across repeated polls (the same warning is seen every poll)."""
        return (self.kind, self.action, self.deadline)

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "action": self.action,
            "deadline": iso(self.deadline),
            "source": self.source,
        }


def iso(ts: float) -> str:
    """Unix seconds to the ISO 8601 form the clouds use (``2025-11-22T00:00:00Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> float:
    """ISO 8601 (with ``Z`` or an offset, optional fraction) to Unix seconds; ValueError if malformed."""
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def preemption_reason(notice: Notice) -> str:
    """The Slurm drain reason for a notice: one line, well under Slurm's limits, parseable back."""
    prefix = REBALANCE_PREFIX if notice.kind == "rebalance" else REASON_PREFIX
    return f"{prefix}: {notice.action} at {iso(notice.deadline)} ({notice.source})"


_REASON_RE = re.compile(
    rf"^(?P<prefix>{REASON_PREFIX}|{REBALANCE_PREFIX}): (?P<action>[a-z]+) at (?P<at>\S+) \((?P<source>[a-z0-9_-]+)\)$"
)


def parse_preemption_reason(reason: str | None) -> Notice | None:
    """The notice a drain reason carries, or None when the reason is not one of ours."""
    if not reason:
        return None
    m = _REASON_RE.match(reason.strip())
    if not m:
        return None
    try:
        deadline = parse_iso(m["at"])
    except ValueError:
        return None
    kind: NoticeKind = "rebalance" if m["prefix"] == REBALANCE_PREFIX else "interruption"
    return Notice(kind=kind, action=m["action"], deadline=deadline, source=m["source"])
