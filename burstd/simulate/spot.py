"""Spot preemptions drawn from measured traces (skypilot-org/spot-traces, NSDI '24 "Can't Be Late").

Each trace file is ``{"metadata": {"gap_seconds": N}, "data": [...]}``, one value a tick: the number of
spot instances alive (the traces' README: "the number of available instances at a specific tick"). A
drop in the value is a preemption. From each file we take the *alive segments*: runs of ticks at the
file's full count, ended by a drop (a preemption) or by the end of the file (censored).

A node's time to preemption is drawn by picking an alive instant uniformly over all measured alive time
and reading the time to the end of its segment; a censored segment adds the rest of it and draws again.
This keeps the measured distribution (bursty, heavy-tailed), not just its mean rate.
"""

from __future__ import annotations

import bisect
import json
import random
from dataclasses import dataclass
from pathlib import Path

CPU_TRACES = ("preemption/1-node/aws-04-19-2023", "preemption/1-node/gcp-04-30-2023")
GPU_TRACES = ("preemption/1-node/aws-04-22-2023", "preemption/4-node/aws-08-03-2023")


@dataclass(frozen=True, slots=True)
class Segment:
    seconds: float
    preempted: bool  # False = the file ended while alive (censored)


def segments_of(data: list[int], gap_s: float) -> list[Segment]:
    full = max(data) if data else 0
    if full <= 0:
        return []
    out: list[Segment] = []
    run = 0
    for v in data:
        if v >= full:
            run += 1
        else:
            if run:
                out.append(Segment(run * gap_s, True))
            run = 0
    if run:
        out.append(Segment(run * gap_s, False))
    return out


class SpotModel:
    """Draw times to preemption from measured alive segments."""

    def __init__(self, segments: list[Segment], seed: int = 1):
        self.segments = [s for s in segments if s.seconds > 0]
        self.rng = random.Random(seed)
        self.cum: list[float] = []
        acc = 0.0
        for s in self.segments:
            acc += s.seconds
            self.cum.append(acc)
        self.alive_s = acc
        self.preemptions = sum(1 for s in self.segments if s.preempted)

    @property
    def rate_per_hour(self) -> float:
        """Measured preemptions per alive node-hour."""
        return self.preemptions / (self.alive_s / 3600.0) if self.alive_s else 0.0

    def draw(self) -> float:
        """Seconds until this node is preempted (inf if the traces never preempt)."""
        if not self.preemptions:
            return float("inf")
        total = 0.0
        for _ in range(10_000):
            x = self.rng.random() * self.alive_s
            k = bisect.bisect_right(self.cum, x)
            seg = self.segments[min(k, len(self.segments) - 1)]
            left = self.cum[min(k, len(self.cum) - 1)] - x
            total += left
            if seg.preempted:
                return total
        return total

    @classmethod
    def from_dir(cls, root: Path, which: tuple[str, ...], seed: int = 1) -> SpotModel:
        segs: list[Segment] = []
        for sub in which:
            for f in sorted((root / sub).glob("*.json")):
                try:
                    doc = json.loads(f.read_text())
                    gap = float(doc["metadata"]["gap_seconds"])
                    data = [int(v) for v in doc["data"]]
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{f}: not a spot trace ({exc})") from None
                segs.extend(segments_of(data, gap))
        if not segs:
            raise ValueError(f"no spot traces under {root} ({', '.join(which)})")
        return cls(segs, seed)


class NoPreemption(SpotModel):
    def __init__(self) -> None:
        super().__init__([], 0)
