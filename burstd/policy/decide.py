"""``decide()``: which pending jobs may burst, to which pool, and why (pure; no I/O).

    decisions = decide(snapshot, leases, budgets, prices, config, now)

One pass over the pending jobs in priority order (highest priority, then oldest first):

1. hard gates: paused, opt-out comment, excluded account/user/partition/QOS, heterogeneous or held job, a
   reservation asked for other than burstd's own (Slurm starts it on no cloud node), pending for a reason that
   is not about resources, priority below ``min_priority``, no time limit, too preempted
   ``max_preemptions_total`` times (the safety cap: on-prem only);
2. expected on-prem wait: Slurm's backfill estimate (``Job.start_time`` on a pending job that is not yet
   burst-eligible), else a fluid model: the job starts when the capacity freed by running on-prem jobs
   (at their end times or time limits) covers the demand of the jobs ahead of it that stay on-prem;
3. the waiting policy (``burstd.policy.waiting``) with per-partition/QOS minimum waits (not again for a job
   requeued while it held a cloud partition: a preempted job qualified already; nor for a job inside its
   declared deadline's safety net that an on-prem start would make late);
4. fit (CPUs, memory, GPUs and GPU type, features, nodes named or excluded, pool accounts, ``policy.burst_to``),
   then the cheapest (pool, market) by expected bill including the rework that spot preemptions cost (spot is
   off for a preempted job behind its Uniform Progress line, for a job inside its ``sbatch --deadline``'s safety
   net, or past the optional ``max_preemptions_spot``); with the value of waiting on, the job bursts only if
   the wait it saves is worth that bill (``burstd.policy.progress``), or once it has waited
   ``max_wait_to_limit_ratio`` x its limit; then the first that still fits the pool's and the account's node
   caps and the budget guard (``burstd.policy.budget``) with every earlier decision of this cycle already
   counted.

Jobs that already carry a cloud partition and fail any of this lose it (``RevokeEligible``); thresholds
for keeping are ``waiting.keep_fraction`` of those for bursting, so estimates that wobble do not flap.
Every pending job considered gets an ``Explanation``. Cost is O(P log P + R log R) for P pending jobs and
R running jobs (fit results are cached per job shape).

This module owns the pass itself; the on-prem model is ``policy.onprem_model``, pool offers, fit and expected cost
are ``policy.offers``, and the explanations' words are ``policy.reasons``.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burstd.config import Config
from burstd.domain.budget import BudgetBook, budget_key
from burstd.domain.decisions import (
    Decisions,
    ExplanationMap,
    MakeEligible,
    Prewarm,
    Release,
    RevokeEligible,
)
from burstd.domain.data import DataMove, DataNeeds
from burstd.domain.lease import Lease
from burstd.domain.slurm import Job, Snapshot
from burstd.policy import waiting
from burstd.policy.cloud_access import cloud_reservation
from burstd.policy.budget import (
    Committed,
    Limits,
    PriceError,
    account_limit,
    burn_cap,
    check_launch,
    committed_spend,
    cost_micros,
    launch_seconds,
    validate_book,
)
from burstd.policy import reasons as R
from burstd.policy.data_cost import DataView, data_move, stays_home
from burstd.policy.progress import (behind_s, deadline_net, line_slack, off_spot, out_of_reach, setbacks, work_left_s,
                                    worth_micros)
from burstd.policy.context import Prepared, _candidates, _parts_info
from burstd.policy.context import _wait_units  # noqa: F401 (re-exported: tests read it here)
from burstd.policy.offers import Offer, PoolView, PriceInput, normalize_prices, pool_offers
from burstd.policy.onprem_model import (
    INF, OnPremModel, array_task_count, array_throttle, node_summary, parse_features,
)

_FAR_FUTURE = 365 * 86400  # Slurm reports "unknown" start times as far-future values
_BOUND_MIN_LIMIT_S = 600.0  # the wait bound counts a limit as at least 10 min: a 1-min job is not starved at 2


@dataclass(slots=True)
class DecideStats:
    """Work counters (for scaling-shape tests): how many times each inner step ran."""

    jobs: int = 0
    estimates: int = 0
    bisect_steps: int = 0
    fit_checks: int = 0
    guard_checks: int = 0


def _priority_key(j: Job) -> tuple:
    return (-j.priority, j.submit_time or 0, j.job_id)


def decide(
    snapshot: Snapshot,
    leases: Sequence[Lease],
    budgets: BudgetBook | None,
    prices: PriceInput,
    config: Config,
    now: float | None = None,
    *,
    stats: DecideStats | None = None,
    explain: bool = True,
    progress: Mapping[int, float] | None = None,
    prepared: Prepared | None = None,
    data: DataView | None = None,
    failed_spot_launches: Mapping[int, int] | None = None,
) -> Decisions:
    """One cycle of policy. Raises ``BudgetError`` / ``PriceError`` on impossible input (decides nothing).

    ``explain=False`` skips writing the sentences (the simulator's fast path); decisions are the same.
    ``progress``: seconds of work a requeued job keeps from its checkpoints, by job id (unknown: none), for
    the Uniform Progress escalation (``burstd.policy.progress``).
    ``failed_spot_launches``: spot launches for a job that found no capacity, by job id (unknown: none); they
    count toward the escalation like preemptions (``burstd.policy.progress.setbacks``).
    ``prepared``: ``Prepared(config, prices)`` kept across cycles (``burstd.policy.context``), so each cycle
    pays only for its snapshot; decisions are the same. It must have been built from these very objects.
    ``data``: the jobs' data declarations and what each pool's cache holds (``burstd.policy.data_cost``): a
    job's transfer time is added to its expected cloud start and its transfer and storage cost to its bill;
    never-leave jobs and accounts stay on-prem. None: only ``[data] never_leave_accounts`` applies.
    """
    if prepared is not None and (prepared.config is not config or prepared.prices is not prices):
        raise ValueError("decide(): prepared was built from another config or price list; "
                         "build it with Prepared(config, prices) from the ones passed")
    gc_was_on = gc.isenabled()
    gc.disable()  # the loop allocates ~1 record a job and makes no cycles: no collector passes over the snapshot
    try:
        return _decide(snapshot, leases, budgets, prices, config, now, stats, explain, progress or {}, prepared,
                       data, failed_spot_launches or {})
    finally:
        if gc_was_on:
            gc.enable()


def _decide(snapshot: Snapshot, leases: Sequence[Lease], budgets: BudgetBook | None, prices: PriceInput,
            config: Config, now: float | None, stats: DecideStats | None, explain: bool,
            progress: Mapping[int, float], prepared: Prepared | None, data: DataView | None,
            failed_spot: Mapping[int, int]) -> Decisions:
    explain_on = explain
    now = snapshot.taken_at if now is None else float(now)
    if budgets is None:  # no store budgets: the config's [budget] section decides
        budgets = BudgetBook(now, now)
    if prepared is None or budgets is not prepared.valid_book:  # a prepared caller's unchanged book: checked already
        validate_book(budgets)
    ctx = prepared or Prepared(config, prices)
    ctx.valid_book = budgets
    quotes = ctx.quotes
    pol = config.policy
    w = pol.waiting
    out = Decisions()

    pools, part_to_pool, cloud_parts, onprem = ctx.pools, ctx.part_to_pool, ctx.cloud_parts, ctx.onprem
    live = [lease for lease in leases if lease.is_live]
    leased_jobs = {jid for lease in live for jid in lease.job_ids}
    jobs_by_id = {j.job_id: j for j in snapshot.jobs if j.job_id in leased_jobs}  # all the guard looks up
    commit: Committed = committed_spend(live, jobs_by_id, now, config, quotes)
    model = OnPremModel(snapshot, cloud_parts, onprem, now)
    limits = Limits(budgets, config)
    s_limit = limits.site
    period = config.budget.period
    boot_s = pol.boot_overhead_s
    ckpt_s = pol.checkpoint_interval_s
    risk_nodes = 1 if pol.risk_aware_market else 0
    accrual = config.budget.accrual_interval_s
    ahead = [0, 0]
    partition_max = {p.name: p.max_time_min for p in snapshot.partitions}
    ctx.begin(partition_max)
    burst_reasons, elig_gate = ctx.excluded, ctx.eligibility.gate
    opt_out = pol.opt_out_comment
    own_resv = cloud_reservation(config.cluster.id)
    max_total, max_spot, min_prio = pol.max_preemptions_total, pol.max_preemptions_spot, pol.min_priority
    qos_floor = pol.min_wait_s_by_qos
    acct_pools = ctx.acct_pools
    newly: dict[str, int] = {}
    part_cache, fit_cache, cand_cache, th_cache = ctx.part_cache, ctx.fit_cache, ctx.cand_cache, ctx.th_cache

    pending = [j for j in snapshot.jobs if j.state == "PENDING"]
    pending.sort(key=_priority_key)
    explanations = ExplanationMap()
    out.explanations = explanations
    records = explanations.records
    revoke = out.revoke
    add_revoke = revoke.append
    vow = w.wait_value_per_hour if w.kind == "burstd" else 0.0
    od_price, wait_unit, pool_cap = ctx.od_price, ctx.wait_unit, ctx.pool_cap
    r_direct, r_gate, r_wait, r_stay, r_burst = R.r_direct, R.r_gate, R.r_wait, R.r_stay, R.r_burst  # hot-loop locals
    acct_caps, acct_default = pol.max_nodes_per_account, pol.default_max_nodes_per_account
    esc_ratio = w.escalated_wait_to_runtime_ratio if w.kind == "burstd" and not vow else 0.0
    slack = pol.progress_slack
    cycle_s = config.daemon.cycle_interval_s
    bound_ratio = w.max_wait_to_limit_ratio if vow else 0.0
    expected_start_in = model.expected_start_in
    data_on = data is not None
    data = data or DataView()
    data_needs, data_near, data_cfg = data.needs, data.near, config.data
    data_gated = bool(data_needs) or bool(data_cfg.never_leave_accounts)
    pool_data = {pc.name: pc.data for pc in config.pools}
    if stats is not None:
        stats.jobs += len(pending)

    for job in pending:
        parts = job.partitions
        pi = part_cache.get(parts)
        if pi is None:
            pi = part_cache[parts] = _parts_info(parts, cloud_parts, onprem, pol, partition_max)
        has_cloud = pi.cloud
        jid = job.job_id
        nodes = job.node_count if job.node_count > 1 else 1
        tasks = array_task_count(job.array_tasks) if job.array_tasks else 1
        gres = job.gres
        gpn = 0
        for g in gres:  # inlined, not cached: a gres (a tuple of frozen dataclasses) is slow to hash
            if g.name == "gpu":
                gpn += g.count
        if gpn:
            track, own = 1, gpn * nodes
        else:
            track, own = 0, job.cpus

        if not pi.home:
            if explain_on:
                records[jid] = (r_direct, jid)
            continue
        gate: str | None = None
        garg: tuple = ()
        if not pi.managed:
            gate, garg = R.G_UNMANAGED, (",".join(pi.home),)
        elif pol.paused:
            gate, garg = R.G_PAUSED, ()
        elif opt_out and opt_out in job.comment:
            gate, garg = R.G_OPTOUT, (opt_out,)
        elif (excluded := elig_gate(job.account, job.user, job.qos)) is not None:  # the launch guard's rule too
            gate, garg = excluded
        elif pi.excluded:
            gate, garg = R.G_PARTITION, (pi.excluded,)
        elif job.het_job_id is not None:
            gate, garg = R.G_HET, ()
        elif job.hold:
            gate, garg = R.G_HELD, ()
        elif job.reservation and own_resv not in job.reservation.split(","):
            gate, garg = R.G_RESERVATION, (job.reservation,)
        elif job.restart_count >= max_total:
            gate, garg = R.G_PREEMPTED, (job.restart_count, max_total)
        elif not has_cloud and job.reason not in burst_reasons:
            gate, garg = R.G_REASON, (job.reason,)
        elif job.priority < min_prio:
            gate, garg = R.G_PRIORITY, (job.priority, min_prio)
        elif job.time_limit_min is None and pi.max_time_min is None:
            gate, garg = R.G_NOLIMIT, ()
        elif data_gated and (home_why := stays_home(data_needs.get(jid), job.account, data_cfg)):
            gate, garg = R.G_DATA, (home_why,)
            out.kept_home_for_data.append(jid)
        if gate is not None:
            ahead[track] += own * tasks
            for p in has_cloud:
                add_revoke(RevokeEligible(jid, p))
            if explain_on:
                records[jid] = (r_gate, jid, gate, garg)
            continue
        # one of them is set: the no-limit gate above sent every other job on-prem
        limit_min = job.time_limit_min if job.time_limit_min is not None else (pi.max_time_min or 0)
        limit_s = limit_min * 60.0

        # expected on-prem wait
        if stats is not None:
            stats.estimates += 1
        st = job.start_time
        if not has_cloud and st is not None and now - 60 <= st < now + _FAR_FUTURE:
            expected = float(st) - now
            expected = expected if expected > 0.0 else 0.0  # noqa: FURB136 (hot loop: no call)
        else:
            expected = expected_start_in(track, own, ahead[track], stats)
        since = job.eligible_time if job.eligible_time is not None else job.submit_time
        waited = now - float(since) if since is not None else 0.0
        waited = waited if waited > 0.0 else 0.0  # noqa: FURB136

        dl = job.deadline
        net = home_late = False
        note: tuple | None = None
        if dl is not None:  # sbatch --deadline: Uniform Progress's safety net (burstd.policy.progress.deadline_net)
            done_s = progress.get(jid, 0.0)
            net = deadline_net(now, dl, limit_s, done_s, boot_s, cycle_s)
            # inside the net it may wait on-prem only while an on-prem start still makes the deadline
            home_late = net and (expected == INF or expected + work_left_s(limit_s, done_s) > dl - now)
            note = (dl, now, work_left_s(limit_s, done_s), boot_s + cycle_s, net,
                    out_of_reach(now, dl, limit_s, done_s, boot_s))

        floor = pi.floor
        if qos_floor and job.qos in qos_floor:
            floor = max(floor, qos_floor[job.qos])
        # the waiting policy (burstd.policy.waiting.verdict, with its thresholds cached per job shape)
        wkind: Any = ""  # the waiting policy's name, or (code 4) the preemption count
        wcode, wnum = 0, 0.0
        if home_late or (has_cloud and job.restart_count > 0):
            # requeued while burst-eligible (a preempted cloud node): it passed these gates before, and the
            # requeue reset its eligible time, so waiting again would only add the gates' delay to its restart;
            # inside its deadline's safety net, a wait on-prem that misses the deadline is no option
            pass
        elif expected == INF:
            if waited < floor:
                wcode, wnum, wkind = 1, floor, "floor"
        else:
            keep = bool(has_cloud)
            tkey = (nodes * tasks, limit_s, floor, keep)
            th = th_cache.get(tkey)
            if th is None:
                th = th_cache[tkey] = waiting.thresholds(w, nodes * tasks * limit_s / 3600.0, limit_s, floor, keep)
            if waited < th[0]:  # quote the wait it will really need, not the first step (a target that stays put)
                wcode, wnum, wkind = 2, (th[1] if expected >= th[3] else max(th[1], th[5])), th[6]
            elif expected < th[2]:
                wcode, wnum, wkind = 3, th[2], th[6]
            elif expected < th[3] and waited < th[4]:
                wcode, wnum, wkind = 2, th[5], th[6]
        why: str | tuple[str, tuple] = ""
        chosen: Offer | None = None
        verdict_left = None
        cost = 0
        want_nodes = 0
        escalated = False
        vow_bill = vow_worth = 0.0
        bound_hit = False
        needs: DataNeeds | None = None
        moves: dict[str, DataMove] = {}
        if not wcode:
            # candidate (pool, market)s, cheapest expected cost first (cached per job shape)
            restarts = job.restart_count
            spot_setbacks = setbacks(restarts, failed_spot.get(jid, 0)) if failed_spot else restarts
            submitted = float(job.submit_time) if job.submit_time is not None else now
            escalated = net or (max_spot is not None and restarts >= max_spot) or (
                spot_setbacks > 0 and (slack > 0.0 or dl is not None) and off_spot(
                    now, submitted, limit_s, progress.get(jid, 0.0), slack, boot_s, spot_setbacks, dl))
            shape_key = (job.cpus, nodes, job.memory_mb, gres, job.features, job.required_nodes,
                         job.excluded_nodes)
            ckey = (shape_key, parts, escalated, job.account if acct_pools else None, tasks, limit_min)
            cached = cand_cache.get(ckey)
            if cached is None:
                fits = fit_cache.get(shape_key)
                if fits is None:
                    fits = fit_cache[shape_key] = {}
                cached = cand_cache[ckey] = _candidates(job, pools, ctx.eligibility, pi.allowed, fits, escalated,
                                                        nodes * tasks, limit_s, ckpt_s, boot_s, stats,
                                                        risk_nodes and nodes)
            candidates, misfit = cached
            needs = data_needs.get(jid) if data_needs else None
            if needs is not None and needs.declared and candidates:
                # the job's own data: its bill grows by the transfer and storage, its start by the stage-in
                run_s = limit_s * nodes * tasks
                moves = {pv: data_move(needs, pv, pool_data[pv], data_near.get(pv, ()), run_s)
                         for pv in {c[1].pool for c in candidates}}
                ranked = sorted(((c + moves[o.pool].cost_micros, o) for c, o in candidates),
                                key=lambda c: (c[0], c[1].pool, c[1].market))
                # a burst that cannot start before the on-prem one would is no burst
                soon = [c for c in ranked if expected == INF or moves[c[1].pool].stage_in_s + boot_s < expected]
                if not soon and not wcode:
                    first = moves[ranked[0][1].pool]
                    wcode, wnum, wkind = 6, float(first.cost_micros), (first, 0.0, 0.0)
                    out.kept_home_for_data.append(jid)
                candidates = soon
            if (esc_ratio and candidates and expected < esc_ratio * limit_s and not home_late
                    and candidates[0][1].market != "spot"
                    and (escalated or (risk_nodes and any(c[1].market == "spot" and c[1].pool == candidates[0][1].pool
                                                          for c in candidates)))):
                # on-demand only (preempted max_preemptions_spot times, or too big and long to finish on
                # spot): bursting buys at most ``expected`` of wait at several times the spot price; while
                # that is short next to the run itself, the job waits on-prem
                wcode, wnum = 4, esc_ratio * limit_s
                wkind = (restarts, spot_setbacks - restarts) if escalated else -1
                candidates = []
            if vow and candidates:
                # value of waiting: burst only when the wait it saves is worth the expected bill
                best = candidates[0][1]
                ref = wait_unit[track] or od_price.get(best.pool, best.price_micros)
                move = moves.get(best.pool)
                saved = expected - boot_s - (move.stage_in_s if move is not None else 0.0)
                bill = candidates[0][0]
                if not risk_nodes:  # the plain ranking leaves out the boot every node bills (the restart model has it)
                    bill += best.price_micros * nodes * tasks * boot_s / 3600.0
                vow_bill = bill
                if has_cloud:  # hysteresis, as for the waiting thresholds
                    saved /= w.keep_fraction or 1.0
                vow_worth = INF if expected == INF else worth_micros(vow, ref * tasks, saved)  # 0 if none saved
                if vow_worth < bill and not home_late:  # (a wait that misses the deadline is worth nothing)
                    # the slowdown bound: past ratio x its limit a job bursts anyway, if that still saves time
                    bound_hit = (bound_ratio > 0.0 and expected > boot_s
                                 and waited >= bound_ratio * (limit_s if limit_s > _BOUND_MIN_LIMIT_S
                                                              else _BOUND_MIN_LIMIT_S))
                    if not bound_hit:
                        wcode, wnum = 5, bill
                        wkind = (vow_worth, best, vow)
                        if move is not None and move.moves_anything:
                            wcode, wkind = 6, (move, vow_worth, bill)
                            out.kept_home_for_data.append(jid)
                        candidates = []
            if not candidates:
                if not wcode:
                    if escalated and not misfit:
                        head = ("inside its deadline's safety net" if net
                                else R.setback_words(restarts, spot_setbacks - restarts))
                        misfit = f"{head}: on-demand only, and no pool offers on-demand"
                    why = misfit or "no cloud pool is configured for it"
            else:
                if has_cloud:  # keep the pool it already has when that one still passes (stability)
                    keep_pool = part_to_pool[has_cloud[0]]
                    candidates = sorted(candidates, key=lambda c: c[1].pool != keep_pool)
                already = jid in leased_jobs
                # nodes it holds at once (an array runs as many tasks as its throttle and the pool allow)
                if already:
                    want_nodes = 0
                elif job.array_tasks:
                    want_nodes = nodes * min(tasks, array_throttle(job.array_tasks) or tasks)
                else:
                    want_nodes = nodes * tasks
                acct_cap = acct_caps.get(job.account, acct_default) if acct_caps else acct_default
                secs = -1.0
                nodes_by_pool = commit.nodes_by_pool
                for _, offer in candidates:
                    cap = pool_cap[offer.pool]
                    in_pool = nodes_by_pool.get(offer.pool, 0)
                    hold_nodes = want_nodes
                    if tasks > 1 and in_pool + hold_nodes > cap and in_pool + nodes <= cap:
                        hold_nodes = cap - in_pool
                    if in_pool + hold_nodes > cap:
                        why = why or (R.W_FULL, (offer.pool, in_pool, cap))
                        continue
                    if acct_cap is not None and commit.nodes_by_account.get(job.account, 0) + hold_nodes > acct_cap:
                        why = why or (R.W_ACCT_CAP, (job.account, acct_cap))
                        continue
                    if secs < 0:
                        secs = launch_seconds(limit_s, config) + accrual
                    cost = 0 if already else nodes * tasks * cost_micros(offer.price_micros, secs)
                    if not already and moves:
                        cost += moves[offer.pool].cost_micros
                    if stats is not None:
                        stats.guard_checks += 1
                    v = check_launch(budgets, commit, account=job.account, cost_micros=cost,
                                     rate_micros_per_hour=hold_nodes * offer.price_micros, config=config,
                                     limits=limits, with_reason=explain_on)
                    if not v.ok:
                        why = why or ("{}", (v.reason or "x",))
                        continue
                    chosen, verdict_left, want_nodes, why = offer, v.account_left_micros, hold_nodes, ""
                    break
        if chosen is None:
            ahead[track] += own * tasks
            for p in has_cloud:
                add_revoke(RevokeEligible(jid, p))
            if explain_on:
                if wcode:
                    records[jid] = (r_wait, jid, waited, expected, wcode, wnum, wkind, note)
                else:
                    records[jid] = (r_stay, jid, waited, expected, why, note)
            continue
        commit.add(job.account, chosen.pool, cost, want_nodes * chosen.price_micros, want_nodes)
        out.markets[jid] = (chosen.pool, chosen.market)  # carried to the lease (burstd.daemon.markets)
        chosen_move = moves.get(chosen.pool)
        if chosen_move is not None:
            out.data_moves[jid] = chosen_move  # what the transfer engine stages (burstd.data)
        for p in has_cloud:
            if p != chosen.partition:
                add_revoke(RevokeEligible(jid, p))
        if chosen.partition not in has_cloud:
            out.eligible.append(MakeEligible(jid, chosen.pool, chosen.partition, chosen.market, cost))
            newly[chosen.pool] = newly.get(chosen.pool, 0) + want_nodes
        if explain_on:
            why_mkt = None
            if vow or escalated:
                # the figures behind the market and the wait: expected bill against the wait's worth, and how far
                # a preempted job is behind its Uniform Progress line
                late = (behind_s(now, submitted, limit_s, progress.get(jid, 0.0),
                                 line_slack(submitted, limit_s, slack, dl))
                        if escalated and not net and (slack > 0.0 or dl is not None) else None)
                why_mkt = (vow_bill, vow_worth, late, (job.restart_count, failed_spot.get(jid, 0)),
                           bound_ratio if bound_hit else None)
            records[jid] = (r_burst, jid, waited, expected, verdict_left, job.account, period, chosen, why_mkt,
                            chosen_move, data_on and not moves, note)
    _prewarm_and_release(snapshot, live, budgets, config, pools, commit, newly, out, s_limit)
    return out


def _prewarm_and_release(snapshot: Snapshot, live: list[Lease], budgets: BudgetBook, config: Config,
                         pools: dict[str, PoolView], commit: Committed, newly: dict[str, int], out: Decisions,
                         s_limit: int | None) -> None:
    pol = config.policy
    by_node = {lease.node_name: lease for lease in live}
    site_out = s_limit is not None and s_limit - budgets.site_spent_micros - commit.site <= 0
    cloud_nodes = node_summary(snapshot.nodes, frozenset(pol.onprem_partitions))[2]
    for node in cloud_nodes:
        if node.is_powered_down or node.is_powering_up or node.state != "IDLE":
            continue
        if "POWERING_DOWN" in node.flags or "POWER_DOWN" in node.flags:
            continue
        if pol.paused:
            out.release.append(Release(node.name, "bursting is paused"))
            continue
        lease = by_node.get(node.name)
        if site_out:
            out.release.append(Release(node.name, "the site budget is spent"))
        elif lease is not None and lease.account:
            lim = account_limit(budgets, lease.account, config)
            ab = budgets.accounts.get(budget_key(lease.account))
            spent = ab.spent_micros if ab else 0
            if lim is not None and lim - spent - commit.accounts.get(lease.account, 0) < 0:
                out.release.append(Release(node.name, f"account {lease.account} budget is spent"))
    if pol.paused or pol.prewarm_nodes <= 0:
        return
    for name, demand in newly.items():
        pool = pools[name]
        room = pool.cap - commit.nodes_by_pool.get(name, 0)
        count = min(pol.prewarm_nodes, room)
        if demand <= 0 or count <= 0:
            continue
        offer = min(pool.offers.values(), key=lambda o: o.price_micros)
        idle_cost = count * cost_micros(offer.price_micros, pol.idle_commit_s + config.budget.accrual_interval_s)
        site_left = None if s_limit is None else s_limit - budgets.site_spent_micros - commit.site
        cap = burn_cap(budgets, config)
        if site_left is not None and idle_cost > site_left:
            continue
        if cap is not None and commit.rate_micros_per_hour + count * offer.price_micros > cap:
            continue
        commit.add("", name, idle_cost, count * offer.price_micros, count)
        out.prewarm.append(Prewarm(name, count))


__all__ = ["decide", "DecideStats", "OnPremModel", "normalize_prices", "pool_offers", "array_task_count",
           "parse_features", "PriceError", "node_summary"]

