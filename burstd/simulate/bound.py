"""A hindsight lower bound on cloud cost at a given mean JCT (``burstctl simulate --bound``; issue 25, item 4).

No policy, however well informed, can burst the replayed jobs for less than this and still reach that mean
JCT on the same site. It is a linear programme (a relaxation, solved with HiGHS), built from the whole trace
in hindsight (every arrival and every real run time known in advance):

- each job ``i`` (released at ``r``, running ``p`` s on ``u`` on-prem units) splits into a cloud share ``x``
  and on-prem shares ``y[t]`` of its work in time slots of ``slot_s``, plus a share ``z`` done after a window
  of ``window_slots`` past its release and its run (a relaxation: no capacity is charged there);
- a cloud share costs the cheapest price a node-hour of any pool and market the job fits, for its nodes,
  for boot + run, with no preemption (no real run on spot costs less) and counts ``boot + p`` of JCT;
- on-prem work is charged against the site's capacity (``units x slot_s`` unit-seconds a slot), at most at the
  job's own rate (``y[t] <= slot_s / p``), never before release;
- an on-prem job's JCT is ``C - r = M + p/2 - r``, with ``M`` its mean busy time (Goemans' relaxation:
  exact for a job that runs ``p`` s at a constant rate); each share's time is taken at the start of its
  slot, or at release, so the LP's ``M`` is never later than any real schedule's;
- the mean of those JCTs is at most the given mean JCT.

Every real replay (whole jobs, one place each, any order or backfill) is a feasible point, so the optimum is a
lower bound on its cost. It is loose where the relaxation is: work split across slots and between cloud and
on-prem, times floored to a slot, no preemption. Pure (the solver is a library call, no I/O).

Whole jobs to the cloud (``integral=True``, the default): each cloud share is 0 or 1, a mixed-integer programme
(HiGHS branch and bound). A real replay still maps onto it: a job that ends in the cloud is a cloud share of 1
(its bill at least the cheapest price for boot + run), a job that ends on-prem (after any number of spot
tries) a share of 0 with its on-prem run, whose bill is at least 0. Without it the LP buys mean JCT with
fractions of big jobs (a tenth of a 100-GPU-hour job for a tenth of its price), which no policy can.
Branch and bound may stop at ``time_limit_s``; the figure is then its proven dual bound (never above the
optimum, never below the LP's), so it stays a lower bound whether or not the search finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from burstd.simulate.engine import SimSetup, Simulator
from burstd.simulate.policies import onprem_fit
from burstd.simulate.traces import TraceJob

if TYPE_CHECKING:  # highspy is imported where it is used (an optional dependency: the ``bound`` extra)
    from types import ModuleType

    from highspy import Highs

# The rows are scaled near 1 (a slot's row in shares of its capacity, the JCT row as a mean in hours): HiGHS
# warns of a badly scaled model otherwise, and its branch and bound gains far less in the same time.
JCT_UNIT_S = 3600.0


@dataclass(frozen=True, slots=True)
class BoundModel:
    """The LP of one replay; ``cost_at(mean_jct_s)`` solves it for one mean JCT (re-using the last basis)."""

    highs: Highs
    jct_row: int
    jobs: int
    min_mean_jct_s: float  # below this no schedule exists (every job at its own run, or boot + run in the cloud)
    slot_s: float
    window_slots: int
    cloud_cols: np.ndarray | None = None  # the cloud shares' columns, made integral by ``integral=True``
    time_limit_s: float = 60.0  # branch and bound's limit a solve; its dual bound stands when it stops

    @property
    def integral(self) -> bool:
        return self.cloud_cols is not None

    def cost_at(self, mean_jct_s: float) -> float | None:
        """The least cloud cost (USD) at a mean JCT of at most ``mean_jct_s``; None when even bursting
        everything at once cannot reach it."""
        lp = self._solve(mean_jct_s, integral=False)
        if lp is None or not self.integral:
            return lp
        mip = self._solve(mean_jct_s, integral=True)
        # the MIP's dual bound is never below the LP's; max() keeps the LP's when the search stopped early
        return lp if mip is None else max(lp, mip)

    def _solve(self, mean_jct_s: float, *, integral: bool) -> float | None:
        import highspy

        if mean_jct_s < self.min_mean_jct_s:
            return None
        h = self.highs
        if self.cloud_cols is not None:
            kind = highspy.HighsVarType.kInteger if integral else highspy.HighsVarType.kContinuous
            h.changeColsIntegrality(len(self.cloud_cols), self.cloud_cols,
                                    np.full(len(self.cloud_cols), kind))
        h.changeRowBounds(self.jct_row, -highspy.kHighsInf, mean_jct_s / JCT_UNIT_S)
        h.setOptionValue("time_limit", self.time_limit_s if integral else math.inf)
        # presolve removes almost nothing here and, before branch and bound, takes as long as its root cuts
        h.setOptionValue("presolve", "off" if integral else "choose")
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            info = h.getInfo()
            return float(info.mip_dual_bound if integral else info.objective_function_value)
        if integral and status == highspy.HighsModelStatus.kTimeLimit:
            bound = float(h.getInfo().mip_dual_bound)
            return bound if math.isfinite(bound) else None
        return None


def _highs_banner_to_stderr(highspy: ModuleType) -> Highs:
    """A silent HiGHS instance. Its constructor prints a banner on the C level's stdout, before any option can
    silence it; that would corrupt ``--json``, so stdout points at stderr while it is made."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def cloud_price_per_node_hour(setup: SimSetup, cpn: int, gpn: int) -> float | None:
    """The cheapest price a node-hour of any pool the job's node fits, on any market the replay offers
    (``--market on-demand``: on-demand only); None when no pool fits."""
    best: float | None = None
    for p in setup.config.pools:
        if p.cpus < cpn or p.gpus < gpn:
            continue
        od = p.price_per_hour if p.market == "on-demand" else p.ondemand_price_per_hour
        if setup.market == "on-demand":
            if od is None:
                continue
            price = od
        else:
            price = min(x for x in (p.price_per_hour, od) if x is not None)
        best = price if best is None else min(best, price)
    return best


def default_slot_s(runtimes: list[float]) -> float:
    """A tenth of the mean run time (whole 5 minutes), at least 15 minutes: an LP of a few columns a job's
    run, whose floor to the slot costs each job about a twentieth of its run in the bound."""
    if not runtimes:
        return 900.0
    return max(900.0, round(sum(runtimes) / len(runtimes) / 10 / 300) * 300)


def build_bound(setup: SimSetup, trace: list[TraceJob], *, slot_s: float | None = None,
                window_slots: int = 96, integral: bool = True, time_limit_s: float = 60.0) -> BoundModel:
    """The programme of ``trace`` replayed on ``setup``'s site (jobs larger than the site left out, as the
    replay); ``slot_s`` defaults to ``default_slot_s`` of the jobs' run times; ``integral``: whole jobs to the
    cloud, branch and bound stopped after ``time_limit_s`` a solve."""
    import highspy

    sim = Simulator(setup, onprem_fit(setup, trace))
    jobs = [sim._sim_job(tj) for tj in sim.trace]
    if slot_s is None:
        slot_s = default_slot_s([j.tj.runtime for j in jobs])
    boot = setup.boot_s
    cap = setup.onprem_units * slot_s
    t0 = min((j.tj.submit for j in jobs), default=0.0)
    cost: list[float] = []
    cloud_cols: list[int] = []
    upper: list[float] = []
    starts: list[int] = [0]
    rows: list[int] = []
    vals: list[float] = []
    jct_coef: list[float] = []
    n = len(jobs)
    slot_rows: dict[int, int] = {}  # slot -> row; rows 0..n-1 are the jobs' "all of it somewhere"
    least_jct = 0.0

    def col(c: float, ub: float, entries: list[tuple[int, float]], jct: float) -> None:
        cost.append(c)
        upper.append(ub)
        jct_coef.append(jct)
        for r, v in entries:
            rows.append(r)
            vals.append(v)
        starts.append(len(rows))

    for i, j in enumerate(jobs):
        r, p, work = j.tj.submit - t0, j.tj.runtime, j.units * j.tj.runtime
        price = cloud_price_per_node_hour(setup, j.cpn, j.gpn)
        cloud_jct = boot + p
        if price is not None:
            cloud_cols.append(len(cost))
            col(price * j.nodes * (boot + p) / 3600.0, 1.0, [(i, 1.0)], cloud_jct)
        least_jct += min(p, cloud_jct) if price is not None else p
        first = int(r // slot_s)
        last = first + math.ceil(p / slot_s) + window_slots
        rate = min(1.0, slot_s / p)
        for t in range(first, last):
            at = max(t * slot_s, r)
            room = min(rate, ((t + 1) * slot_s - at) / p)
            if room <= 0:
                continue
            srow = slot_rows.setdefault(t, -1)
            if srow < 0:
                srow = slot_rows[t] = n + len(slot_rows) - 1
            col(0.0, room, [(i, 1.0), (srow, work / cap)], at - r + p / 2)
        col(0.0, 1.0, [(i, 1.0)], last * slot_s - r + p / 2)  # after the window: no capacity charged
    jct_row = n + len(slot_rows)
    ncols = len(cost)
    # the JCT row's entries go into each column: rebuild the column-wise matrix with them appended
    a_start = np.zeros(ncols + 1, dtype=np.int32)
    a_index: list[int] = []
    a_value: list[float] = []
    for c in range(ncols):
        a_index.extend(rows[starts[c]:starts[c + 1]])
        a_value.extend(vals[starts[c]:starts[c + 1]])
        a_index.append(jct_row)
        a_value.append(jct_coef[c] / (n * JCT_UNIT_S))
        a_start[c + 1] = len(a_index)
    lp = highspy.HighsLp()
    lp.num_col_ = ncols
    lp.num_row_ = jct_row + 1
    lp.col_cost_ = np.array(cost)
    lp.col_lower_ = np.zeros(ncols)
    lp.col_upper_ = np.array(upper)
    row_lower = np.concatenate([np.ones(n), np.full(len(slot_rows), -highspy.kHighsInf), [-highspy.kHighsInf]])
    row_upper = np.concatenate([np.ones(n), np.ones(len(slot_rows)), [highspy.kHighsInf]])
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a_start
    lp.a_matrix_.index_ = np.array(a_index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(a_value)
    h = _highs_banner_to_stderr(highspy)
    h.setOptionValue("log_to_console", False)
    h.passModel(lp)
    cols = np.array(cloud_cols, dtype=np.int32) if integral else None
    return BoundModel(h, jct_row, n, least_jct / n if n else 0.0, slot_s, window_slots, cols, time_limit_s)
