"""A simple decider for the daemon's unit tests (a test double of ``burstd.policy.decide.decide``, conforming to
``burstd.daemon.reconcile.Decider``): tests of the cycle's mechanics (leases, intents, gangs) need a decider whose
answer they can predict from a line of reasoning, not the full policy's. The rule: a pending job in one of
``policy.onprem_partitions`` that has waited longer than ``policy.waiting.min_wait_s`` for one of
``policy.burst_reasons`` gets the partition of the first pool it fits added. The real policy has its own tests
(``tests/unit/policy``) and drives the daemon in the bed tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

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
    *,
    progress: Mapping[int, float] | None = None,  # the work requeued jobs kept: this rule ignores it
    data: object = None,  # the jobs' declared data (a DataView): this rule ignores it
    failed_spot_launches: Mapping[int, int] | None = None,  # spot launches without capacity: ignored too
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
