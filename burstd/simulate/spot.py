"""Spot preemptions drawn from measured traces (skypilot-org/spot-traces, NSDI '24 "Can't Be Late").

Each trace file is ``{"metadata": {"gap_seconds": N}, "data": [...]}``, one value a tick. How a value is read
is a named choice (``SINGLE_NODE_READING``, ``GANG_THRESHOLD``), taken from the authors' own simulator rather
than the traces' README (see ``Reading``). From each file we take the *alive segments*: runs of alive ticks,
ended by a preemption (an alive tick followed by a dead one) or by the end of the file (censored).

A node's time to preemption is drawn by picking an alive instant uniformly over all measured alive time
and reading the time to the end of its segment; a censored segment adds the rest of it and draws again.
This keeps the measured distribution (bursty, heavy-tailed), not just its mean rate.
"""

from __future__ import annotations

import bisect
import enum
import json
import random
from dataclasses import dataclass
from pathlib import Path

CPU_TRACES = ("preemption/1-node/aws-04-19-2023", "preemption/1-node/gcp-04-30-2023")
GPU_TRACES = ("preemption/1-node/aws-04-22-2023", "preemption/4-node/aws-08-03-2023")

#: The folders above, shipped inside the package (data/spot/README.md: source, citation, licence)
PACKAGED_TRACES = Path(__file__).resolve().parent / "data" / "spot" / "skypilot_spot_traces"


class Reading(enum.Enum):
    """What a value in a single-node (0/1) preemption file means.

    The traces' README says each value is "the number of available instances", which reads 1 = alive.
    The authors' simulator (sky_spot, ``TraceEnv.spot_available``) returns ``not trace[tick]``: 1 =
    preempted, and its strategies and published results are computed under that reading. The two
    differ a lot: CPU files give 2.60 preemptions per alive node-hour read the authors' way, 0.41 read
    the README's way. We follow the authors (``SINGLE_NODE_READING``).
    """

    ONE_IS_PREEMPTED = "one-is-preempted"  # sky_spot: available = not trace[tick]
    ONE_IS_ALIVE = "one-is-alive"  # the README's wording


SINGLE_NODE_READING = Reading.ONE_IS_PREEMPTED

# Multi-node files hold a count of live instances (0..N). sky_spot's ``Trace`` turns them into
# availability with ``--gang-threshold``: count >= threshold is available. A gang job needs all its
# nodes, so we use the full count of the file (None = the file's maximum).
GANG_THRESHOLD: int | None = None


def alive_ticks(data: list[int], reading: Reading = SINGLE_NODE_READING,
                gang_threshold: int | None = GANG_THRESHOLD) -> list[bool]:
    """One bool a tick: is the (gang of) instance(s) alive. Files with values > 1 are counts."""
    if not data:
        return []
    top = max(data)
    if top > 1:  # a multi-node count file
        need = gang_threshold if gang_threshold is not None else top
        return [v >= need for v in data]
    if reading is Reading.ONE_IS_PREEMPTED:
        return [v == 0 for v in data]
    return [v >= 1 for v in data]


@dataclass(frozen=True, slots=True)
class Segment:
    seconds: float
    preempted: bool  # False = the file ended while alive (censored)


def segments_of(data: list[int], gap_s: float, reading: Reading = SINGLE_NODE_READING,
                gang_threshold: int | None = GANG_THRESHOLD) -> list[Segment]:
    out: list[Segment] = []
    run = 0
    for alive in alive_ticks(data, reading, gang_threshold):
        if alive:
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


def availability_of(doc: object, where: str) -> tuple[list[bool], float]:
    """One bool a tick (spot available, read as ``alive_ticks`` reads it) and the tick in seconds, from a
    trace file's parsed JSON; ValueError naming ``where`` and what is wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict) or "data" not in doc:
        raise ValueError(f"{where}: not a spot trace (needs metadata.gap_seconds and data)")
    gap = doc["metadata"].get("gap_seconds")
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not (0 < gap < 1e7):
        raise ValueError(f"{where}: metadata.gap_seconds must be a positive number of seconds, got {gap!r}")
    data = doc["data"]
    if not isinstance(data, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                             for v in data):
        raise ValueError(f"{where}: data must be a list of counts (integers >= 0)")
    return alive_ticks(data), float(gap)


def read_availability(path: Path) -> tuple[list[bool], float]:
    """``availability_of`` a trace file (skypilot-org/spot-traces' format)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a spot trace ({exc})") from None
    return availability_of(doc, str(path))
