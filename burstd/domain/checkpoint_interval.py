"""How often a job with no notice-free protection should checkpoint: Young/Daly (pure, no torch, no I/O).

A reclaim without notice loses the work since the last checkpoint; each checkpoint costs its save time. With
checkpoints every ``T`` seconds of work, a save cost ``C`` and a mean time between failures ``M``, the expected
waste is about ``C/T + T/(2M)``, least at Young's ``T = sqrt(2 C M)``. Daly's higher-order form,
``sqrt(2 C M) * (1 + sqrt(C/2M)/3 + (C/2M)/9) - C`` for ``C < 2M`` (else ``M``), is closer when saves are
dear next to ``M``; it is what :func:`daly_interval_s` answers.

    interval = choose_interval(save_cost_s=4.0, step_s=0.5, preemptions_per_hour=2.0, nodes=1)
    interval.steps, interval.seconds        # -> 235 steps, 117.5 s of work between saves

``M`` comes from the pool's observed preemption rate (per node and hour: ``domain.preempt_rate``, which reaches the
job as ``BURSTD_PREEMPT_RATE_PER_HOUR``, ``train.interval``); a job on ``n`` nodes is hit ``n`` times as often.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval_s(save_cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum ``sqrt(2 C M)``."""
    _check(save_cost_s, mtbf_s)
    return math.sqrt(2.0 * save_cost_s * mtbf_s)


def daly_interval_s(save_cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (2006): seconds of work between the starts of two saves."""
    _check(save_cost_s, mtbf_s)
    if save_cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_cost_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_cost_s


def _check(save_cost_s: float, mtbf_s: float) -> None:
    if not (math.isfinite(save_cost_s) and save_cost_s >= 0):
        raise ValueError(f"save cost must be a finite number of seconds >= 0, got {save_cost_s!r}")
    if not (math.isfinite(mtbf_s) and mtbf_s > 0):
        raise ValueError(f"mean time between preemptions must be a finite number of seconds > 0, got {mtbf_s!r}")


@dataclass(frozen=True)
class Interval:
    steps: int  # checkpoint every this many steps; 0 = no periodic checkpoint (no preemptions expected)
    seconds: float  # the work between two saves at the measured step time (inf when steps is 0)
    why: str  # one line for the researcher's log

    def __str__(self) -> str:
        return self.why


def choose_interval(*, save_cost_s: float, step_s: float, preemptions_per_hour: float, nodes: int = 1,
                    max_steps: int = 1_000_000) -> Interval:
    """The checkpoint interval in whole steps (at least 1) for a job on ``nodes`` nodes of a pool that loses
    ``preemptions_per_hour`` nodes per node-hour. A rate of 0 means no periodic checkpoints (0 steps)."""
    if not (math.isfinite(step_s) and step_s > 0):
        raise ValueError(f"step time must be a finite number of seconds > 0, got {step_s!r}")
    if not (math.isfinite(preemptions_per_hour) and preemptions_per_hour >= 0):
        raise ValueError(f"the preemption rate must be a finite rate >= 0 per hour, got {preemptions_per_hour!r}")
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    if preemptions_per_hour == 0:
        return Interval(0, math.inf, "no preemptions expected (rate 0/h): checkpoints only on a preemption signal")
    mtbf_s = 3600.0 / (preemptions_per_hour * nodes)
    seconds = daly_interval_s(save_cost_s, mtbf_s)
    steps = min(max_steps, max(1, round(seconds / step_s)))
    why = (f"checkpoint every {steps} steps ({steps * step_s:.1f} s of work): Young/Daly for a save of "
           f"{save_cost_s:.2f} s and {preemptions_per_hour:g} preemptions per node-hour on {nodes} node(s) "
           f"(one every {mtbf_s / 60:.1f} min)")
    return Interval(steps, steps * step_s, why)
