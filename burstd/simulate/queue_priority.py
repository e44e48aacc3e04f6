"""Queue priority classes of the on-prem model (``--queue-priority``; issue 25, item 2).

Sites ran their queues (SWF field 15: LoadLeveler classes, PBS/Maui queues, Slurm partitions) as priority
classes: a job of a higher class is considered before any job of a lower one, whenever it arrived (Slurm's
``PriorityWeightPartition`` / partition ``PriorityTier``, Maui's QOS and class priority). With an ordering the
pending queue is sorted by class first, then by submit time; EASY backfill is unchanged and so keeps its one
reservation for the head of that ordered queue. Without one (the default) the queue is in submit order, the
model as it was.

An ordering is given as queue numbers, highest class first (``"0,1,2,3,4"``); a queue not named ranks below
every named one. ``"auto"`` reads it from the SWF header's ``; Queue: N name`` lines where the names are the
usual priority words (interactive, express, high, normal, low, standby, as SDSC Blue Horizon's are); a queue
whose name is none of them ranks with ``normal``, the class a job lands in when it names none. SWF traces only:
the Philly and ``sacct`` readers record no queue a job. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from burstd.simulate.traces import TraceInfo, TraceJob

#: Priority words as queue (class) names, highest first; "auto" orders a header's queues by them.
CLASS_WORDS = ("interactive", "express", "high", "normal", "low", "standby")
DEFAULT_WORD = "normal"


@dataclass(frozen=True, slots=True)
class QueuePriority:
    ranks: tuple[tuple[str, int], ...] = ()  # (queue as TraceJob.queue names it, rank); 0 is the highest
    unlisted: int = 0  # the rank of a queue not in ``ranks``
    source: str = ""  # how the ordering was got, for the report ("" when off)

    @property
    def active(self) -> bool:
        return bool(self.ranks)

    def order_key(self) -> Callable[[TraceJob], tuple]:
        """The pending queue's sort key for a trace job: (class rank, submit, id); (submit, id) when off."""
        if not self.ranks:
            return _submit_order
        rank, unlisted = dict(self.ranks), self.unlisted
        return lambda tj: (rank.get(tj.queue, unlisted), tj.submit, tj.job_id)

    def describe(self) -> str:
        """The classes in words, highest first ("q0 > q1 > q2, others"); "" when off."""
        if not self.ranks:
            return ""
        groups: dict[int, list[str]] = {}
        for q, r in self.ranks:
            groups.setdefault(r, []).append(q)
        groups.setdefault(self.unlisted, []).append("others")
        return " > ".join(", ".join(groups[r]) for r in sorted(groups))


NO_PRIORITY = QueuePriority()  # the default: one class, submit order


def _submit_order(tj: TraceJob) -> tuple:
    return (tj.submit, tj.job_id)


def queue_priority(spec: str | None, info: TraceInfo, path: str = "the trace") -> QueuePriority:
    """``--queue-priority``: None or "" (off), "auto" (from ``info``'s header queue names), or queue numbers
    highest class first ("0,1,2"). Raises ``ValueError`` naming the option (and the file, for "auto")."""
    if spec is None or not spec.strip():
        return NO_PRIORITY
    spec = spec.strip()
    if info.format != "swf":  # only SWF records a queue a job (field 15); the other readers leave it unset
        raise ValueError(f"--queue-priority {spec!r}: {path} is a {info.format} trace, which records no queue a "
                         "job; queue classes need an SWF trace (field 15)")
    if spec.lower() == "auto":
        return _from_header(info, path)
    ranks: list[tuple[str, int]] = []
    seen: set[int] = set()
    for i, token in enumerate(x.strip() for x in spec.split(",")):
        if not token.isdigit():
            raise ValueError(f"--queue-priority {spec!r}: {token!r} is not a queue number (give queue numbers, "
                             "SWF field 15, highest class first, e.g. 0,1,2; or auto)")
        n = int(token)
        if n in seen:
            raise ValueError(f"--queue-priority {spec!r}: queue {n} is named twice")
        seen.add(n)
        ranks.append((f"q{n}", i))
    return QueuePriority(tuple(ranks), len(ranks), f"given: {','.join(str(int(q[1:])) for q, _ in ranks)}")


def _from_header(info: TraceInfo, path: str) -> QueuePriority:
    if not info.queues:
        raise ValueError(f"--queue-priority auto: {path} has no '; Queue: N name' header lines to order the queues "
                         "by; give the queue numbers, highest class first")
    words = {w: i for i, w in enumerate(CLASS_WORDS)}
    named = {n: name.lower() for n, name in info.queues if name.lower() in words}
    if not named:
        names = ", ".join(name for _, name in info.queues)
        raise ValueError(f"--queue-priority auto: {path}'s header queues ({names}) name no priority class "
                         f"({', '.join(CLASS_WORDS)}); give the queue numbers, highest class first")
    # a queue named otherwise (SDSC's Diag, legion, ...) is one of "the others", ranked with normal
    ranks = tuple((f"q{n}", words[named[n]]) for n, _ in info.queues if n in named)
    return QueuePriority(ranks, words[DEFAULT_WORD], "the trace header's queue names")
