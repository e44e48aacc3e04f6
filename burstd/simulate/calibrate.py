"""Does the on-prem model reproduce the site's own history? (``burstctl simulate --calibrate``)

Every verdict the simulator gives is about its model of the on-prem scheduler. This replays a trace with no
bursting at all (the ``never`` policy) and sets each job's modelled wait beside the wait the site's own scheduler
recorded in the same file (SWF field 3; ``Start - Submit`` in a ``sacct`` export). Philly's CSV records no waits,
so it cannot be calibrated this way.

Figures, over the jobs that have a recorded wait and ran in the replay:

* ``recorded_mean_wait_s`` and ``model_mean_wait_s``, and their ratio;
* ``median_abs_rel_error``: the median of ``|model - recorded| / max(recorded, floor)``;
* ``share_within_2x``: the share of jobs whose modelled wait is within a factor of two of the recorded one,
  both taken as at least ``floor`` (60 s: below a scheduler cycle, "no wait" and "a few seconds" are the same
  answer, and a ratio of two tiny numbers says nothing).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from burstd.simulate.limits import NO_LIMITS, UserLimits
from burstd.simulate.policies import make_setup, policy_simulator
from burstd.simulate.queue_priority import queue_priority as read_queue_priority
from burstd.simulate.traces import read_trace

#: Waits below this count as this much when compared (seconds).
WAIT_FLOOR_S = 60.0


@dataclass(frozen=True, slots=True)
class WaitPair:
    recorded: float
    model: float


def compare(pairs: list[WaitPair], floor: float = WAIT_FLOOR_S) -> dict[str, Any]:
    """The calibration figures for (recorded, modelled) waits. Pure."""
    if not pairs:
        raise ValueError("no job has both a recorded wait and a modelled one: nothing to calibrate against")
    rec = [p.recorded for p in pairs]
    mod = [p.model for p in pairs]
    errors = [abs(p.model - p.recorded) / max(p.recorded, floor) for p in pairs]
    within = sum(1 for p in pairs if 0.5 <= max(p.model, floor) / max(p.recorded, floor) <= 2.0)
    rec_mean, mod_mean = statistics.fmean(rec), statistics.fmean(mod)
    return {
        "jobs_compared": len(pairs),
        "recorded_mean_wait_s": round(rec_mean, 1),
        "model_mean_wait_s": round(mod_mean, 1),
        "mean_ratio": round(mod_mean / rec_mean, 4) if rec_mean > 0 else None,
        "recorded_median_wait_s": round(statistics.median(rec), 1),
        "model_median_wait_s": round(statistics.median(mod), 1),
        "median_abs_rel_error": round(statistics.median(errors), 4),
        "share_within_2x": round(within / len(pairs), 4),
        "wait_floor_s": floor,
    }


def calibrate_trace(path: str | Path, *, format: str | None = None, onprem_cpus: int | None = None,
                    limit_jobs: int | None = None, placement: str = "fluid", backfill_depth: int = 100,
                    out_of_order: bool = False, sched_pass_s: float = 0.0,
                    user_limits: UserLimits = NO_LIMITS, queue_priority: str | None = None) -> dict[str, Any]:
    """Replay ``path`` with no bursting and compare each job's wait with the one the trace recorded
    (``sched_pass_s``: the on-prem scheduler runs in passes that far apart; 0: at every event;
    ``user_limits``: per-user running limits, ``burstd.simulate.limits``; ``queue_priority``: the queues'
    priority classes, "auto" or queue numbers highest first, ``burstd.simulate.queue_priority``)."""
    jobs, info = read_trace(path, format, limit_jobs)
    if info.format == "philly":
        raise ValueError(f"{path}: the Philly CSV records no waits; calibration needs an SWF trace or a sacct "
                         "export (with Start)")
    recorded = {j.job_id: j.recorded_wait for j in jobs if j.recorded_wait is not None}
    if not recorded:
        raise ValueError(f"{path}: no job records its wait (SWF field 3 is -1 throughout, or the sacct export "
                         "has no Start column)")
    classes = read_queue_priority(queue_priority, info, str(path))
    setup = make_setup(info, False, None, onprem_cpus, None, None, placement=placement,
                       backfill_depth=backfill_depth, out_of_order=out_of_order, user_limits=user_limits,
                       queue_priority=classes)
    setup = replace(setup, sched_pass_s=sched_pass_s)
    sim = policy_simulator("never", setup, jobs)
    sim.run()
    pairs = [WaitPair(recorded[j.tj.job_id], j.first_start - j.tj.submit) for j in sim.done
             if j.tj.job_id in recorded and j.first_start is not None]
    out = {"trace": str(path), "format": info.format, "jobs_read": len(jobs),
           "onprem_units": setup.onprem_units, "onprem_units_per_node": setup.units_per_node,
           "placement": setup.placement, "backfill_depth": setup.backfill_depth, "out_of_order": out_of_order,
           "sched_pass_s": sched_pass_s, "user_max_running_jobs": user_limits.max_jobs,
           "user_max_running_cpus": user_limits.max_units, "queue_priority": classes.describe() or None,
           "jobs_without_recorded_wait": len(jobs) - len(recorded)}
    out.update(compare(pairs))
    return out
