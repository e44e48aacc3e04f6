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

And from the record alone, ``recorded_stalls``: how much of the site's history looks like lost capacity (an
outage, dedicated time) that a cleaned trace no longer says, so that no scheduler model can reproduce it.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from burstd.simulate.limits import NO_LIMITS, UserLimits
from burstd.simulate.policies import make_setup, policy_simulator
from burstd.simulate.queue_priority import queue_priority as read_queue_priority
from burstd.simulate.traces import TraceJob, read_trace

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


#: A stall is at least this long (seconds): longer than any scheduler pass, shorter than a maintenance day.
STALL_MIN_S = 6 * 3600.0


def recorded_stalls(jobs: list[TraceJob], capacity: int, min_s: float = STALL_MIN_S) -> dict[str, Any]:
    """Stretches of the record in which the site started nothing for at least ``min_s`` while jobs waited and
    less than half of its ``capacity`` (CPUs) was busy (at the stretch's middle, by the recorded starts and run
    times): capacity the site lost, which its own scheduler would not have left idle. Also the share of jobs
    whose recorded wait reaches past the end of one, and their share of all the recorded wait: the most a model
    that knew every stall could fix, of the per-job match and of the mean. Pure."""
    ran = sorted((j.submit + j.recorded_wait, j.submit, j.runtime, j.cpus) for j in jobs
                 if j.recorded_wait is not None)
    if len(ran) < 2:
        return {"min_s": min_s, "count": 0, "days": 0.0, "trace_days": 0.0, "share_of_jobs_waiting_across": 0.0,
                "share_of_recorded_wait_across": 0.0}
    starts = [r[0] for r in ran]
    submits = sorted(r[1] for r in ran)
    by_end = sorted((s + run, cpus) for s, _, run, cpus in ran)
    ends = [e for e, _ in by_end]
    cpus_started = list(itertools.accumulate(r[3] for r in ran))
    cpus_ended = list(itertools.accumulate(c for _, c in by_end))

    def busy(t: float) -> int:
        i, k = bisect.bisect_right(starts, t), bisect.bisect_right(ends, t)
        return (cpus_started[i - 1] if i else 0) - (cpus_ended[k - 1] if k else 0)

    stalls = []  # (last start before, first start after)
    for a, b in itertools.pairwise(starts):
        waiting = bisect.bisect_left(submits, b) - bisect.bisect_left(starts, b)  # submitted before b, not started
        if b - a >= min_s and waiting > 0 and busy((a + b) / 2) < capacity / 2:
            stalls.append((a, b))
    stall_ends = [b for _, b in stalls]
    across = [start - submit for start, submit, _, _ in ran  # submitted before a stall ended, started at its end
              if (i := bisect.bisect_right(stall_ends, submit)) < len(stall_ends) and stall_ends[i] <= start]
    total_wait = sum(start - submit for start, submit, _, _ in ran)
    return {"min_s": min_s, "count": len(stalls), "days": round(sum(b - a for a, b in stalls) / 86400, 1),
            "trace_days": round((starts[-1] - starts[0]) / 86400, 1),
            "share_of_jobs_waiting_across": round(len(across) / len(ran), 4),
            "share_of_recorded_wait_across": round(sum(across) / total_wait, 4) if total_wait > 0 else 0.0}


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
    out["recorded_stalls"] = recorded_stalls(jobs, setup.onprem_units)
    return out
