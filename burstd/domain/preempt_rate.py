"""A pool's observed preemption rate: preemptions per node-hour its nodes ran (pure, no I/O).

The rate is what ``burstd.train.interval`` needs for Young/Daly (``BURSTD_PREEMPT_RATE_PER_HOUR``): a one-node job
on a pool that loses a node every ``1/rate`` node-hours should checkpoint about every ``sqrt(2 C / rate)``.

    rate = observed_rate("aws-spot", leases, failed_events, now=now)
    rate.per_node_hour      # e.g. 0.42, or None while the pool has too little history to say
    rate_text(rate.per_node_hour)   # "0.42": the only form written into a job's environment

Exposure counts each lease from slurmd's registration (``ready_at``) to its end (or ``now``), within the last
``window_s``; a preemption is a lease FAILED with a reason starting "preempted" (a notice whose deadline passed,
or the provider reporting its reclaim), as ``burstctl jobs`` counts them. With no preemption and less than
``min_node_hours`` of exposure the pool has not shown anything yet: None, and the job keeps its own default.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from burstd.domain.lease import Lease, LeaseEvent, LeaseState

WINDOW_S = 7 * 86400.0  # a week: recent enough to follow a market's mood, long enough to have seen some hours
MIN_NODE_HOURS = 1.0  # below this, no preemption seen means "unknown", not "never"
MAX_RATE = 3600.0  # one a second: anything above is a bookkeeping error, not a market


@dataclass(frozen=True)
class PoolRate:
    pool: str
    preemptions: int
    node_hours: float
    per_node_hour: float | None  # None: too little history to say

    def as_dict(self) -> dict[str, object]:
        return {"pool": self.pool, "preemptions": self.preemptions, "node_hours": round(self.node_hours, 4),
                "rate_per_node_hour": self.per_node_hour}


def is_preemption(event: LeaseEvent) -> bool:
    return event.to_state == LeaseState.FAILED and event.reason.startswith("preempted")


def observed_rate(pool: str, leases: Iterable[Lease], events: Iterable[LeaseEvent], *, now: float,
                  window_s: float = WINDOW_S, min_node_hours: float = MIN_NODE_HOURS) -> PoolRate:
    """The rate of ``pool`` from its ``leases`` (others are ignored) and their ``events`` in the last ``window_s``."""
    since = now - window_s
    mine = {le.lease_id: le for le in leases if le.pool == pool}
    seconds = 0.0
    for le in mine.values():
        if le.ready_at is None:
            continue  # never ran a job: no exposure
        end = now if le.ended_at is None else le.ended_at
        seconds += max(0.0, min(end, now) - max(le.ready_at, since))
    preempted = {e.lease_id for e in events if e.lease_id in mine and since <= e.at <= now and is_preemption(e)}
    hours = seconds / 3600.0
    if hours <= 0 or (not preempted and hours < min_node_hours):
        return PoolRate(pool, len(preempted), hours, None)
    return PoolRate(pool, len(preempted), hours, min(MAX_RATE, len(preempted) / hours))


def rate_text(rate: float) -> str:
    """The rate as written into a node's file and a job's environment: a plain decimal, checked finite and >= 0
    (so nothing but digits, a dot and an exponent can ever reach a shell line)."""
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and 0 <= rate <= MAX_RATE):
        raise ValueError(f"preemption rate must be a finite number in [0, {MAX_RATE:g}] per node-hour, got {rate!r}")
    return f"{float(rate) + 0.0:.6g}"  # + 0.0: never "-0"


def checkpoint_view(rate: PoolRate, *, nodes: int, step_time_s: float | None,
                    save_cost_s: float | None = None) -> dict[str, object]:
    """What ``burstctl explain`` shows: the rate a job on ``nodes`` nodes of the pool would get and the Young/Daly
    interval it leads to. The save cost is the job's own (it measures its first save); without it the interval is
    given as its rule, ``sqrt(2 x save x mtbf)``, with the mean time between preemptions filled in."""
    from burstd.domain.checkpoint_interval import choose_interval, daly_interval_s

    out: dict[str, object] = {**rate.as_dict(), "nodes": nodes, "step_time_s": step_time_s,
                              "save_cost_s": save_cost_s, "mtbf_s": None, "interval_s": None,
                              "interval_steps": None}
    r = rate.per_node_hour
    if r is None:
        out["sentence"] = (f"checkpoint interval: the job's default (pool {rate.pool} has {rate.node_hours:.2f} "
                           f"node-hours and no preemption on record: rate unknown)")
        return out
    if r == 0:
        out["sentence"] = (f"checkpoint interval: none periodic (pool {rate.pool}: 0 preemptions in "
                           f"{rate.node_hours:.1f} node-hours); the job checkpoints on a preemption signal")
        return out
    mtbf = 3600.0 / (r * max(1, nodes))
    out["mtbf_s"] = mtbf
    seen = f"pool {rate.pool}: {r:.3g} preemptions per node-hour ({rate.preemptions} in {rate.node_hours:.1f} h)"
    if save_cost_s is None or step_time_s is None:
        out["sentence"] = (f"checkpoint interval: sqrt(2 x save x {mtbf:.0f} s) of work, e.g. "
                           f"{daly_interval_s(1.0, mtbf):.0f} s for a 1 s save; {seen}; the job measures its "
                           "save at the first checkpoint and prints the interval it chose")
        return out
    interval = choose_interval(save_cost_s=save_cost_s, step_s=step_time_s, preemptions_per_hour=r, nodes=nodes)
    out.update(interval_s=interval.seconds, interval_steps=interval.steps, sentence=f"{interval.why}; {seen}")
    return out
