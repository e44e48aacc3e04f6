"""The on-prem side of ``decide()``: reading a job's shape (features, array tasks) and the fluid model of when the
on-prem cluster will have room for it (``OnPremModel``). Pure."""

from __future__ import annotations

import bisect
import math
import re
from itertools import accumulate
from typing import TYPE_CHECKING

from burstd.domain.slurm import Node, Snapshot

if TYPE_CHECKING:
    from burstd.policy.decide import DecideStats

INF = float("inf")
_RUNNING = ("RUNNING", "CONFIGURING", "COMPLETING")  # Job.is_running's states

_FEATURE_SPLIT = re.compile(r"[&,()\[\]]")


def parse_features(expr: str) -> list[frozenset[str]]:
    """A constraint expression as a list of alternatives (AND inside, OR between), counts dropped."""
    if not expr:
        return []
    alts = []
    for alt in expr.split("|"):
        names = frozenset(t.split("*")[0].strip() for t in _FEATURE_SPLIT.split(alt) if t.strip())
        if names:
            alts.append(names)
    return alts


def array_task_count(spec: str) -> int:
    """Number of tasks in a pending array record's ``array_tasks`` ("1-9", "1,3,5-7:2", "0-99%4")."""
    if not spec:
        return 1
    n = 0
    for part in spec.split("%")[0].split(","):
        part = part.strip()
        if not part:
            continue
        step = 1
        if ":" in part:
            part, s = part.split(":", 1)
            step = max(1, int(s)) if s.isdigit() else 1
        if "-" in part:
            a, b = part.split("-", 1)
            if a.isdigit() and b.isdigit() and int(b) >= int(a):
                n += (int(b) - int(a)) // step + 1
            else:
                n += 1
        else:
            n += 1
    return max(n, 1)


def array_throttle(spec: str) -> int | None:
    """The ``%N`` limit of an array record, if any."""
    if "%" in spec:
        tail = spec.rsplit("%", 1)[1]
        if tail.isdigit() and int(tail) > 0:
            return int(tail)
    return None


_SUMMARY_CACHE: list = [None, None, None]  # (nodes tuple, onprem set, result): one entry, identity-checked


def node_summary(nodes: tuple[Node, ...], onprem: frozenset[str]) -> tuple[int, int, tuple[Node, ...]]:
    """Usable on-prem CPUs and GPUs, and the cloud nodes. Cached for the very same ``nodes`` tuple (the
    simulator passes one tuple every cycle); the result depends only on its arguments."""
    c = _SUMMARY_CACHE
    if c[0] is nodes and c[1] == onprem:
        return c[2]
    total_cpu = total_gpu = 0
    cloud = []
    for n in nodes:
        if "CLOUD" in n.flags:
            cloud.append(n)
            continue
        if onprem and not (set(n.partitions) & onprem):
            continue
        if n.state in ("DOWN", "DRAINED", "FUTURE") or n.is_drained:
            continue
        total_cpu += n.cpus
        if n.gres:
            total_gpu += sum(g.count for g in n.gres if g.name == "gpu")
    result = (total_cpu, total_gpu, tuple(cloud))
    c[0], c[1], c[2] = nodes, onprem, result
    return result


class OnPremModel:
    """Expected on-prem start from running jobs' end times (fluid model, per CPU and GPU track)."""

    def __init__(self, snapshot: Snapshot, cloud_partitions: frozenset[str], onprem: frozenset[str], now: float):
        self.now = now
        total_cpu, total_gpu, _ = node_summary(snapshot.nodes, onprem)
        used_cpu = used_gpu = 0
        ends_cpu: list[tuple[float, int]] = []
        ends_gpu: list[tuple[float, int]] = []
        limits = []
        for j in snapshot.jobs:
            # Job.is_running inlined: this loop runs over every job every cycle
            if j.state not in _RUNNING or (j.partitions and j.partitions[0] in cloud_partitions):
                continue
            limit_min = j.time_limit_min
            if j.end_time is not None:
                end = float(j.end_time)
            elif j.start_time is not None and limit_min:
                end = float(j.start_time) + limit_min * 60
            else:
                end = now + 86400.0
            if end < now:
                end = now
            if limit_min:
                limits.append(limit_min * 60.0)
            gpn = 0
            for g in j.gres:  # Job.gpus inlined (a gres is a tuple of frozen dataclasses: slow to hash)
                if g.name == "gpu":
                    gpn += g.count
            cpus = j.cpus
            used_cpu += cpus
            ends_cpu.append((end, cpus))
            if gpn:
                gpus = gpn * (j.node_count if j.node_count > 1 else 1)
                used_gpu += gpus
                ends_gpu.append((end, gpus))
        self.total = (total_cpu, total_gpu)
        self.free = (max(total_cpu - used_cpu, 0), max(total_gpu - used_gpu, 0))
        self.mean_limit = (sum(limits) / len(limits)) if limits else 3600.0
        # each track's (end times, cumulative units freed) is built on first need: a cycle whose queue fits
        # in the free units never sorts the running jobs
        self._ends = (ends_cpu, ends_gpu)
        self._tracks: list[tuple[list[float], list[int]] | None] = [None, None]

    def track(self, track: int) -> tuple[list[float], list[int]]:
        """Running on-prem jobs of a track (0 CPUs, 1 GPUs) by end time: (end times, cumulative units freed)."""
        got = self._tracks[track]
        if got is None:
            ends = self._ends[track]
            ends.sort()
            got = self._tracks[track] = ([e for e, _ in ends], list(accumulate(c for _, c in ends)))
        return got

    def expected_start_in(self, track: int, own: int, ahead: int, stats: DecideStats | None = None) -> float:
        """Seconds until ``own`` units fit after ``ahead`` units queued before them (INF: never fits)."""
        total = self.total[track]
        if own > total:
            return INF
        need = own + ahead - self.free[track]
        if need <= 0:
            return 0.0
        times, cum = self._tracks[track] or self.track(track)
        if cum and need <= cum[-1]:
            k = bisect.bisect_left(cum, need)
            if stats is not None:
                stats.bisect_steps += max(1, len(cum).bit_length())
            return max(times[k] - self.now, 0.0)
        # beyond every running job: the queue drains in rounds of the whole cluster
        last = (times[-1] - self.now) if times else 0.0
        over = need - (cum[-1] if cum else 0)
        return last + math.ceil(over / max(total, 1)) * self.mean_limit


