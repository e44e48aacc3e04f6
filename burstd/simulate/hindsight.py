"""A hindsight schedule under the site's own scheduler: the other side of the bound (issue 25, item 4).

``burstd.simulate.bound`` is below every policy, but it relaxes the site as well as the bursting: it may run
the on-prem queue in any order, split across slots. So it cannot tell how much of a policy's distance from it
is the policy's and how much is the relaxation's. This module brackets the optimum from above instead: a
*plan*, made with every arrival and every run time known in advance, of which jobs go to the cloud. It is
replayed by the same engine as every policy, with ``decide()`` replaced by the plan: at each cycle every
planned job still queued bursts on-demand, and every other job runs on-prem under the replay's own scheduler
(FCFS with EASY backfill, whatever the replay models). So its cost and mean JCT are achieved, not estimated:
a daemon that knew the future could follow it, cycle for cycle, within each pool's node count. Hence, at a
policy's mean JCT, the best policy of all costs at most the cheapest plan found and at least the bound:

    bound <= optimum <= plan,  so a policy's cost / plan is a floor on how far it is from optimal.

The search (pure, no I/O: the engine replays in memory) is greedy and time-boxed, not exact:

1. *grow*: replay the plan (at first: nothing in the cloud); while its mean JCT is above the target, add the
   queued on-prem jobs whose wait saves the most JCT per dollar (wait - boot over the job's on-demand bill)
   until the waits they shed cover the gap, and replay again;
2. *prune*: try taking planned jobs back on-prem, dearest first, in blocks halved when the replay misses
   the target, keeping every removal whose replay still meets it, until the time is up.

What the plan is not held to: a config's money (budgets, the burn rate) and its per-account gates and
node caps. The built-in sites have none; on a site's own config that sets them, the plan is a reference
point, not a bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from burstd.simulate.engine import SimJob, SimSetup, Simulator
from burstd.simulate.policies import onprem_fit, policy_config
from burstd.simulate.traces import TraceJob


@dataclass(frozen=True, slots=True)
class Outcome:
    """One replay of a plan."""

    cost_usd: float
    mean_jct_s: float
    waits: dict[int, float]  # on-prem jobs: job id -> wait (start - submit)


@dataclass(frozen=True, slots=True)
class Plan:
    """The cheapest plan found for a target mean JCT, as replayed."""

    jobs: frozenset[int]  # job ids sent to the cloud at their first cycle (unless the site starts them first)
    cost_usd: float
    mean_jct_s: float
    replays: int


class _Planned(Simulator):
    """The engine with ``decide()`` replaced by a plan: at each cycle, every planned job still queued bursts
    on-demand (a job the site starts before its cycle comes runs on-prem, as with any policy). Cycles run only
    while a planned job is queued: the rest of the time nothing would change at one. A pool holds at most its
    ``node_count`` nodes at once, as ``decide()`` keeps it: a planned job it has no room for waits a cycle."""

    def __init__(self, setup: SimSetup, jobs: list[TraceJob], pools: dict[int, str]):
        super().__init__(setup, jobs, "hindsight")
        self.pools = pools
        self.waiting = 0  # planned jobs queued
        self.room = {p.name: p.node_count for p in setup.config.pools}  # nodes each pool has free

    def _enqueue(self, j: SimJob, t: float) -> None:
        super()._enqueue(j, t)
        self.waiting += j.tj.job_id in self.pools

    def _start_onprem(self, j: SimJob, t: float) -> None:
        super()._start_onprem(j, t)
        self.waiting -= j.tj.job_id in self.pools

    def _want_tick(self, t: float) -> None:
        if self.waiting:
            super()._want_tick(t)

    def _tick(self, t: float) -> None:
        self.tick_at = None
        pools = self.pools
        for j in self.queue:
            pool = pools.get(j.tj.job_id)
            if pool is not None and not j.gone and self.room[pool] >= j.nodes:
                self.room[pool] -= j.nodes
                self._burst(j, pool, "on-demand", t)
                self.waiting -= 1
        self.queue = [j for j in self.queue if not j.gone]

    def _finish(self, j: SimJob, t: float) -> None:
        super()._finish(j, t)
        if j.burst:
            self.room[self.pools[j.tj.job_id]] += j.nodes


class Hindsight:
    """Plans for one replay's site and trace; ``plan_for(mean_jct_s)`` searches one target."""

    def __init__(self, setup: SimSetup, trace: list[TraceJob]):
        cfg = policy_config(setup.config, "ondemand-all")  # every pool on-demand, at its on-demand price
        # a spot pool with no on-demand price would be planned at its spot price with no preemption, a
        # schedule nobody can buy: the plan leaves it out
        od = {p.name for p in setup.config.pools if p.market == "on-demand" or p.ondemand_price_per_hour is not None}
        self.setup = replace(setup, config=cfg, spot=None, decide_enabled=True, market="on-demand", data=None)
        self.trace = onprem_fit(setup, trace)  # as the replay
        probe = Simulator(self.setup, self.trace)
        self.pool: dict[int, str] = {}  # the cheapest pool each job's node fits
        self.bill: dict[int, float] = {}  # that pool's on-demand bill for boot + run, USD
        for tj in self.trace:
            sj = probe._sim_job(tj)
            fits = [(p.price_per_hour, p.name) for p in cfg.pools
                    if p.name in od and p.cpus >= sj.cpn and p.gpus >= sj.gpn and p.node_count >= sj.nodes]
            if fits:
                price, name = min(fits)
                self.pool[tj.job_id] = name
                self.bill[tj.job_id] = price * sj.nodes * (setup.boot_s + tj.runtime) / 3600.0
        self.replays = 0

    def replay(self, plan: frozenset[int]) -> Outcome:
        sim = _Planned(self.setup, self.trace, {i: self.pool[i] for i in plan})
        res = sim.run()
        self.replays += 1
        waits = {j.tj.job_id: (j.last_start or 0.0) - j.tj.submit for j in sim.done if not j.burst}
        return Outcome(res.cloud_cost_usd, res.jct_mean_s, waits)

    def plan_for(self, mean_jct_s: float, time_s: float = 60.0) -> Plan | None:
        """The cheapest plan found within ``time_s`` whose replay's mean JCT is at most ``mean_jct_s``; None
        when the search finds none (even every job that fits a pool, sent at its first cycle, may be slower)."""
        t_end = time.monotonic() + time_s
        n0 = self.replays
        boot = self.setup.boot_s
        plan: frozenset[int] = frozenset()
        got = self.replay(plan)
        while got.mean_jct_s > mean_jct_s:
            gap = (got.mean_jct_s - mean_jct_s) * len(self.trace)  # job-seconds of JCT to shed
            # every queued job is a candidate: one that waited less than a boot loses JCT itself but frees
            # the site for the jobs behind it (ranked last, shedding nothing in the estimate)
            gain = sorted(((w - boot) / max(self.bill[i], 1e-9), max(w - boot, 0.0), i)
                          for i, w in got.waits.items() if i in self.pool and w > 0)
            if not gain:
                return None  # every job left on-prem starts at once: no plan reaches the target
            add: set[int] = set()
            while gain and gap > 0:
                _, shed, i = gain.pop()
                add.add(i)
                gap -= shed
            plan = plan | add
            got = self.replay(plan)
        # prune, the dearest first, in blocks halved on failure: where most removals keep the target (a long
        # trace) a block takes many back in one replay; where they fail, it ends as the one-by-one search
        order = sorted(plan, key=lambda i: -self.bill[i])
        size = max(1, len(order) // 16)
        blocks = [order[k:k + size] for k in range(0, len(order), size)][::-1]
        while blocks and time.monotonic() < t_end:
            block = blocks.pop()
            trial = plan - set(block)
            out = self.replay(trial)
            if out.mean_jct_s <= mean_jct_s:
                plan, got = trial, out
            elif len(block) > 1:
                half = len(block) // 2
                blocks += [block[half:], block[:half]]  # the dearer half next
        return Plan(plan, got.cost_usd, got.mean_jct_s, self.replays - n0)
