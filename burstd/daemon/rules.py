"""The first bursting rule and a simple launch guard: what the loop runs before the full policy.

``first_rule`` has the same signature as ``burstd.policy.decide.decide`` so the daemon can use either
(``daemon.decider``). The rule: a pending job in one of ``policy.onprem_partitions`` that has waited
longer than ``policy.waiting.min_wait_s`` for one of ``policy.burst_reasons`` (Resources, Priority, ...)
gets the partition of the first pool it fits added. Pure: no I/O, no clock (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from burstd.config import Config, PoolConfig
from burstd.domain.budget import BudgetBook, PriceQuote
from burstd.domain.decisions import Decisions, Explanation, MakeEligible, RevokeEligible
from burstd.domain.lease import Lease
from burstd.domain.money import cost_micros, format_usd, usd_to_micros
from burstd.domain.slurm import Job, Snapshot


def _fits(job: Job, pool: PoolConfig) -> str | None:
    """None when one of ``pool``'s nodes can hold the job, else why not."""
    if job.node_count > pool.node_count:
        return f"needs {job.node_count} nodes, pool {pool.name} has {pool.node_count}"
    per_node_cpus = -(-job.cpus // max(job.node_count, 1))
    if per_node_cpus > pool.cpus:
        return f"needs {per_node_cpus} CPUs a node, pool {pool.name} nodes have {pool.cpus}"
    if job.memory_mb and job.memory_mb > pool.memory_mb:
        return f"needs {job.memory_mb} MiB a node, pool {pool.name} nodes have {pool.memory_mb}"
    if job.gpus > pool.gpus:
        return f"needs {job.gpus} GPUs a node, pool {pool.name} nodes have {pool.gpus}"
    if pool.accounts is not None and job.account not in pool.accounts:
        return f"account {job.account} may not use pool {pool.name}"
    return None


def cloud_partitions(config: Config) -> set[str]:
    return {p.partition for p in config.pools}


def first_rule(
    snapshot: Snapshot,
    leases: Sequence[Lease],
    budgets: BudgetBook | None,
    prices: Iterable[PriceQuote] | dict | None,
    config: Config,
    now: float,
) -> Decisions:
    pol = config.policy
    out = Decisions()
    clouds = cloud_partitions(config)
    onprem = set(pol.onprem_partitions)
    for job in snapshot.jobs:
        if not job.is_pending:
            continue
        has_cloud = [p for p in job.partitions if p in clouds]
        if pol.paused:
            for part in has_cloud:
                out.revoke.append(RevokeEligible(job.job_id, part))
            continue
        if has_cloud or not (set(job.partitions) & onprem):
            continue

        def no(reason: str, job: Job = job) -> None:
            out.explanations[job.job_id] = Explanation(job.job_id, False, None, reason)

        if job.hold:
            no("held")
            continue
        if pol.opt_out_comment and pol.opt_out_comment in (job.comment or ""):
            no(f"opted out (comment {pol.opt_out_comment!r})")
            continue
        if job.account in pol.exclude_accounts or job.user in pol.exclude_users:
            no(f"account {job.account} / user {job.user} excluded from bursting")
            continue
        if set(job.partitions) & set(pol.exclude_partitions):
            no("partition excluded from bursting")
            continue
        if job.reason not in pol.burst_reasons:
            no(f"pending for {job.reason}, not one of {', '.join(pol.burst_reasons)}")
            continue
        if job.priority < pol.min_priority:
            no(f"priority {job.priority} below policy.min_priority {pol.min_priority}")
            continue
        since = job.eligible_time or job.submit_time or now
        waited = now - since
        if waited < pol.waiting.min_wait_s:
            no(f"waited {waited:.0f}s of the {pol.waiting.min_wait_s:.0f}s minimum")
            continue
        candidates: list[str] = []
        for part in job.partitions:
            if part in onprem:
                candidates += pol.burst_to.get(part, [p.name for p in config.pools])
        why_not = []
        for name in dict.fromkeys(candidates):
            pool = config.pool(name)
            misfit = _fits(job, pool)
            if misfit:
                why_not.append(misfit)
                continue
            hours = (job.time_limit_min or 60) / 60 * job.node_count
            expected = cost_micros(usd_to_micros(pool.price_per_hour), hours * 3600)
            out.eligible.append(MakeEligible(job.job_id, pool.name, pool.partition, pool.market, expected))
            out.explanations[job.job_id] = Explanation(
                job.job_id, True, pool.name,
                f"waited {waited:.0f}s for {job.reason} (min {pol.waiting.min_wait_s:.0f}s); "
                f"fits pool {pool.name}, expected cost {format_usd(expected)}",
            )
            break
        else:
            no("; ".join(why_not) or "no pool configured for its partition")
    return out


def launch_refusal(
    account: str,
    expected_micros: int,
    book: BudgetBook | None,
    committed_micros: dict[str, int],
    config: Config,
) -> str | None:
    """Why a launch must not happen (budget), or None. ``committed_micros``: running leases' expected
    remaining cost by account (key "" = site total)."""
    bc = config.budget
    site_committed = committed_micros.get("", 0)
    if book is not None and book.site_limit_micros is not None:
        left = book.site_limit_micros - book.site_spent_micros - site_committed
        if expected_micros > left:
            return f"site budget: {format_usd(expected_micros)} needed, {format_usd(max(left, 0))} left"
    elif book is None and bc.site_usd is not None:
        left = usd_to_micros(bc.site_usd) - site_committed
        if expected_micros > left:
            return f"site budget: {format_usd(expected_micros)} needed, {format_usd(max(left, 0))} left"
    limit: int | None = None
    spent = 0
    if book is not None and account in book.accounts:
        limit = book.accounts[account].limit_micros
        spent = book.accounts[account].spent_micros
    if limit is None:
        usd = bc.accounts.get(account, bc.default_account_usd)
        if usd is None:
            return f"account {account or '(none)'} has no budget (set one or budget.default_account_usd)"
        limit = usd_to_micros(usd)
    left = limit - spent - committed_micros.get(account, 0)
    if expected_micros > left:
        return f"account {account} budget: {format_usd(expected_micros)} needed, {format_usd(max(left, 0))} left"
    return None
