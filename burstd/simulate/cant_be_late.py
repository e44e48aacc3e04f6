"""One job, one deadline, a measured spot market: the "Can't Be Late" setting (NSDI '24; issue 25, item 4). Pure.

A job of ``work_s`` seconds must finish by ``deadline_s`` after its submission. Time runs in the trace's
ticks (``gap_s``); at each tick a strategy picks spot (only while the trace says spot is available),
on-demand or nothing. Every start of a node, and every restart after a preemption, costs ``overhead_s`` of
billed time with no progress (the paper's changeover delay); a spot node whose tick turns unavailable is
preempted at the tick's start and keeps its progress (the paper's setting: the job checkpoints). Bills are
pro rata to the second, the last tick included.

Three ways to run it:

- ``burstd``: the escalation burstd's ``decide()`` applies (``burstd.policy.progress.off_spot``), driven tick by
  tick with the job's deadline as its Uniform Progress line (``progress_slack = deadline / work``, the limit
  = the work) and the changeover as its boot. As in the daemon: a spot launch that finds no capacity leaves
  the job queued and counts like a preemption (``burstd.policy.progress.setbacks``); once set back and behind
  the line by more than two changeovers, it goes on-demand and stays there (a Slurm job does not migrate);
  what ``decide()`` is told of the work done is the daemon's belief (``kept_work_s``: whole checkpoint
  intervals of each run), while the progress itself is the setting's (all of it kept);
  ``burstd_reported_progress`` is the same for a job that reports its steps (``burstd.train``), whose
  work the daemon knows; ``burstd_preemptions_only`` is the rule before issue 25's fix (failed launches
  not counted), kept for the comparison; ``burstd_deadline_declared`` (and
  ``burstd_reported_progress_deadline_declared``, with its progress reported) is a job that declares its deadline
  (``sbatch --deadline``), so ``decide()`` is also told that deadline and applies its safety net
  (``burstd.policy.progress.deadline_net``, the tick as the cycle) to a queued job; as in the daemon, a job
  running on spot stays there until spot takes it away.
- ``uniform_progress``: the paper's rule as its text describes it (our implementation, no code of theirs):
  spot whenever available; without spot, on-demand while behind the line ``work x t / deadline``, nothing
  while ahead; on on-demand, back to spot or to nothing only when ahead of the line by two changeovers
  (hysteresis); and a safety net that goes on-demand for good once the time left is no more than the
  work left plus a changeover and a tick.
- ``omniscient_cost``: the least cost of any schedule that knows the whole trace in advance, an integer
  programme over the ticks (HiGHS): a binary spot or on-demand choice a tick, a changeover charged at each
  start, any share of a chosen tick used (a relaxation that only lowers it), the work done by the deadline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from burstd.policy.progress import kept_work_s, off_spot, setbacks
from burstd.simulate.bound import _highs_banner_to_stderr

NONE, SPOT, ON_DEMAND = "none", "spot", "on-demand"


@dataclass(frozen=True, slots=True)
class Setting:
    work_s: float = 48 * 3600.0
    deadline_s: float = 52 * 3600.0
    overhead_s: float = 0.2 * 3600.0
    spot_per_hour: float = 0.918  # p3.2xlarge, us-east-1 (the built-in GPU site's prices)
    ondemand_per_hour: float = 3.06
    checkpoint_interval_s: float = 3600.0  # burstd's belief of the work a run kept (policy.checkpoint_interval_s)

    def __post_init__(self) -> None:
        if not (0 < self.work_s <= self.deadline_s) or self.overhead_s < 0:
            raise ValueError(f"need 0 < work_s <= deadline_s and overhead_s >= 0, got {self}")

    @property
    def ondemand_only_usd(self) -> float:
        """The reference: start on-demand at once and run to the end."""
        return (self.work_s + self.overhead_s) * self.ondemand_per_hour / 3600.0


@dataclass(frozen=True, slots=True)
class State:
    """What a strategy sees at the start of a tick."""

    t: float  # seconds since submission
    done_s: float  # work done (kept)
    running: str  # NONE, SPOT or ON_DEMAND: what ran in the tick before (after any preemption)
    spot_available: bool
    preemptions: int
    believed_done_s: float  # what burstd's daemon believes was kept (whole checkpoint intervals of each run)
    failed_launches: int  # spot launches that found no capacity
    gap_s: float  # the tick


Strategy = Callable[[State, Setting], str]


@dataclass(frozen=True, slots=True)
class Outcome:
    cost_usd: float
    finish_s: float  # inf: not done within three deadlines (a strategy that waits for spot that never comes)
    met_deadline: bool
    preemptions: int
    spot_s: float
    ondemand_s: float


def burstd(s: State, st: Setting, spot_setbacks: int | None = None, done_s: float | None = None,
           deadline_declared: bool = False) -> str:
    if s.running == ON_DEMAND:
        return ON_DEMAND  # a job on an on-demand node runs there to its end
    if s.running == SPOT:
        return SPOT  # still alive (a preempted node was taken away before this call)
    slack = st.deadline_s / st.work_s
    restarts = setbacks(s.preemptions, s.failed_launches) if spot_setbacks is None else spot_setbacks
    done = s.believed_done_s if done_s is None else done_s
    deadline = st.deadline_s if deadline_declared else None  # the line is the same: progress_slack above
    if off_spot(s.t, 0.0, st.work_s, done, slack, st.overhead_s, restarts, deadline, s.gap_s):
        return ON_DEMAND
    return SPOT  # decide() does not see capacity: without it the launch fails and the job stays queued


def burstd_reported_progress(s: State, st: Setting) -> str:
    """burstd for a job that reports its progress (``burstd.train``): ``decide()`` is told the work really
    kept, not whole checkpoint intervals of its leases."""
    return burstd(s, st, done_s=s.done_s)


def burstd_deadline_declared(s: State, st: Setting) -> str:
    """burstd for a job that declares its deadline (``sbatch --deadline``): ``decide()`` also applies the
    deadline's safety net, told the daemon's belief of the work kept."""
    return burstd(s, st, deadline_declared=True)


def burstd_reported_progress_deadline_declared(s: State, st: Setting) -> str:
    """Both: a job that reports its progress and declares its deadline."""
    return burstd(s, st, done_s=s.done_s, deadline_declared=True)


def burstd_preemptions_only(s: State, st: Setting) -> str:
    """burstd before issue 25's fix, measured beside it: only preemptions count toward the escalation, so a job
    whose spot launches find no capacity waits for spot past its line."""
    return burstd(s, st, s.preemptions)


def uniform_progress(s: State, st: Setting) -> str:
    left = st.work_s - s.done_s
    if st.deadline_s - s.t <= left + st.overhead_s + s.gap_s:
        return ON_DEMAND  # the safety net: from here only on-demand, without a pause, still makes it
    ahead = s.done_s - st.work_s * s.t / st.deadline_s
    if s.running == ON_DEMAND and ahead < 2 * st.overhead_s:
        return ON_DEMAND
    if s.spot_available:
        return SPOT
    return ON_DEMAND if ahead < 0 else NONE


def ondemand_only(s: State, st: Setting) -> str:
    return ON_DEMAND


def replay(available: Sequence[bool], gap_s: float, st: Setting, strategy: Strategy) -> Outcome:
    """Run ``strategy`` from the trace's first tick until the work is done (past the deadline if it must;
    past the trace's end, spot counts as unavailable)."""
    t = done = believed = spot_s = od_s = cost = 0.0
    running, overhead_left, preemptions = NONE, 0.0, 0
    run_started = 0.0  # when the current spot run's node was ready (for burstd's belief of kept work)
    runs: list[float] = []
    tick = failed = 0
    while done < st.work_s - 1e-9:
        if t > 3 * st.deadline_s:
            return Outcome(cost, math.inf, False, preemptions, spot_s, od_s)
        avail = tick < len(available) and bool(available[tick])
        if running == SPOT and not avail:
            runs.append(t - run_started)
            believed = kept_work_s(runs, st.checkpoint_interval_s)
            running, preemptions = NONE, preemptions + 1
        choice = strategy(State(t, done, running, avail, preemptions, believed, failed, gap_s), st)
        if choice == SPOT and not avail:
            choice, failed = NONE, failed + 1  # no capacity: the launch fails and the job waits a tick
        if choice != running:
            if running == SPOT:
                runs.append(t - run_started)
                believed = kept_work_s(runs, st.checkpoint_interval_s)
            overhead_left = st.overhead_s if choice != NONE else 0.0
            run_started = t + overhead_left
        running = choice
        if running == NONE:
            t += gap_s
            tick += 1
            continue
        step = min(gap_s, overhead_left + (st.work_s - done))  # the work may end inside this tick
        work = max(0.0, step - overhead_left)
        overhead_left = max(0.0, overhead_left - step)
        done = min(st.work_s, done + work)
        price = st.spot_per_hour if running == SPOT else st.ondemand_per_hour
        cost += price * step / 3600.0
        if running == SPOT:
            spot_s += step
        else:
            od_s += step
        t += step
        tick += 1 if step >= gap_s else 0
    return Outcome(cost, t, t <= st.deadline_s + 1e-6, preemptions, spot_s, od_s)


def omniscient_cost(available: Sequence[bool], gap_s: float, st: Setting, time_limit_s: float = 60.0
                    ) -> float | None:
    """The least cost of a schedule that knows ``available`` in advance and finishes by the deadline (None:
    no schedule does); an integer programme over the ticks, solved with HiGHS to its proven lower bound."""
    import highspy
    import numpy as np

    n = math.ceil(st.deadline_s / gap_s)
    # columns a tick: spot on, on-demand on (binary); spot used, on-demand used (shares of the tick);
    # spot start, on-demand start (>= 0, at least the rise of "on")
    son, oon, sus, ous, sst, ost = (k * n for k in range(6))
    ncols = 6 * n
    cost = np.zeros(ncols)
    upper = np.ones(ncols)
    last_share = min(1.0, (st.deadline_s - (n - 1) * gap_s) / gap_s)  # the deadline may end inside a tick
    for t in range(n):
        share = last_share if t == n - 1 else 1.0
        cost[sus + t] = st.spot_per_hour * gap_s / 3600.0
        cost[ous + t] = st.ondemand_per_hour * gap_s / 3600.0
        upper[sus + t] = upper[ous + t] = share
        if not (t < len(available) and available[t]):
            upper[son + t] = 0.0
        upper[sst + t] = upper[ost + t] = highspy.kHighsInf
    rows: list[tuple[list[int], list[float], float, float]] = []
    for t in range(n):
        rows.append(([son + t, oon + t], [1.0, 1.0], -highspy.kHighsInf, 1.0))  # one node at a time
        rows.append(([sus + t, son + t], [1.0, -1.0], -highspy.kHighsInf, 0.0))  # used only if on
        rows.append(([ous + t, oon + t], [1.0, -1.0], -highspy.kHighsInf, 0.0))
        prev_s = [son + t - 1] if t else []
        prev_o = [oon + t - 1] if t else []
        rows.append(([sst + t, son + t, *prev_s], [1.0, -1.0, *([1.0] if t else [])], 0.0, highspy.kHighsInf))
        rows.append(([ost + t, oon + t, *prev_o], [1.0, -1.0, *([1.0] if t else [])], 0.0, highspy.kHighsInf))
    # the work: seconds used minus a changeover a start
    idx = [sus + t for t in range(n)] + [ous + t for t in range(n)] + [sst + t for t in range(n)] + \
        [ost + t for t in range(n)]
    val = [gap_s] * (2 * n) + [-st.overhead_s] * (2 * n)
    rows.append((idx, val, st.work_s, highspy.kHighsInf))
    h = _highs_banner_to_stderr(highspy)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 1e-3)  # its proven bound is what we report: a tenth of a percent is plenty
    h.addVars(ncols, np.zeros(ncols), upper)
    h.changeColsCost(ncols, np.arange(ncols, dtype=np.int32), cost)
    for cols, vals, lo, hi in rows:
        h.addRow(lo, hi, len(cols), np.array(cols, dtype=np.int32), np.array(vals))
    binaries = np.arange(0, 2 * n, dtype=np.int32)
    h.changeColsIntegrality(len(binaries), binaries, np.full(len(binaries), highspy.HighsVarType.kInteger))
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status not in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kTimeLimit):
        raise RuntimeError(f"HiGHS: {h.modelStatusToString(status)}")
    bound = float(h.getInfo().mip_dual_bound)
    return bound if math.isfinite(bound) else None
