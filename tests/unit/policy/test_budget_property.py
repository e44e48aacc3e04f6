"""Invariant 5 under random queues, prices and budgets: no decided launch overspends, and the guard agrees."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_factories import NOW, book, config, lease, onprem_nodes, pending, pool, running

from burstd.domain.budget import PriceQuote
from burstd.domain.lease import LeaseState
from burstd.domain.money import cost_micros
from burstd.domain.slurm import Snapshot
from burstd.policy import decide, guard_launch
from burstd.policy.budget import account_limit, committed_spend, launch_seconds, site_limit
from tests.hypothesis_profiles import examples

ACCOUNTS = ["chem", "bio", "phys"]
POOLS = ["p1", "p2"]


@st.composite
def worlds(draw):
    pools = [pool(name, f"cloud-{name}", f"{name}n", count=draw(st.integers(1, 30)),
                  cpus=draw(st.sampled_from([4, 8, 16])), price=draw(st.floats(0.01, 20, allow_nan=False)),
                  ondemand=None, max_nodes=draw(st.none() | st.integers(0, 30)))
             for name in POOLS]
    budget = {"burn_rate_usd_per_hour": draw(st.none() | st.floats(0, 100)),
              "default_account_usd": draw(st.none() | st.floats(0, 50))}
    cfg = config(pools=pools, budget=budget,
                 policy={"waiting": {"kind": draw(st.sampled_from(["none", "constant", "compute", "burstd"])),
                                     "min_expected_wait_s": 0}})
    limits = {a: draw(st.none() | st.floats(0, 200)) for a in ACCOUNTS}
    spent = {a: draw(st.floats(0, 100)) for a in ACCOUNTS}
    bk = book(limits, site=draw(st.none() | st.floats(0, 400)), spent=spent)
    n_jobs = draw(st.integers(0, 25))
    jobs, leases = [], []
    for i in range(n_jobs):
        acct = draw(st.sampled_from(ACCOUNTS + ["other"]))
        cloud = draw(st.sampled_from([None, None, "cloud-p1", "cloud-p2"]))
        parts = ("batch",) if cloud is None else ("batch", cloud)
        jobs.append(pending(i + 1, cpus=draw(st.sampled_from([1, 4, 8, 16])), account=acct,
                            limit_min=draw(st.integers(1, 24 * 60)), waited_s=draw(st.floats(0, 86400)),
                            partitions=parts, priority=draw(st.integers(0, 1000)),
                            node_count=draw(st.integers(1, 4)),
                            array_tasks=draw(st.sampled_from(["", "", "1-5", "0-9%2"]))))
    for i in range(draw(st.integers(0, 8))):  # cloud jobs running on live leases
        jid = 500 + i
        acct = draw(st.sampled_from(ACCOUNTS))
        pname = draw(st.sampled_from(POOLS))
        jobs.append(dataclasses.replace(running(jid, account=acct, partition=f"cloud-{pname}",
                                                end_in_s=draw(st.floats(0, 36000)), limit_min=draw(st.integers(1, 900)))))
        leases.append(lease(i, pool=pname, account=acct, price=draw(st.floats(0.01, 20)), job_ids=(jid,),
                            state=draw(st.sampled_from([LeaseState.READY, LeaseState.BOOTING, LeaseState.TERMINATED]))))
    onprem = tuple(running(10_000 + k, end_in_s=draw(st.floats(0, 36000))) for k in range(4))
    snap = Snapshot(NOW, onprem + tuple(jobs), onprem_nodes(4))
    drift = {(p, "spot"): PriceQuote(p, "spot", int(draw(st.floats(0.01, 40)) * 1e6)) for p in POOLS
             if draw(st.booleans())}
    return cfg, bk, snap, leases, drift


def _job_cost(job, price_micros, cfg):
    from burstd.policy.onprem_model import array_task_count
    secs = launch_seconds(job.time_limit_min * 60.0, cfg) + cfg.budget.accrual_interval_s
    return max(job.node_count, 1) * array_task_count(job.array_tasks) * cost_micros(price_micros, secs)


def _check_no_overspend(cfg, bk, snap, leases, prices):
    d = decide(snap, leases, bk, prices, cfg)
    jobs = {j.job_id: j for j in snap.jobs}
    commit = committed_spend(leases, jobs, NOW, cfg, prices)
    leased = {jid for le in leases if le.is_live for jid in le.job_ids}
    revoked = {(r.job_id, r.partition) for r in d.revoke}
    price_of = {p.partition: (prices.get((p.name, "spot")).price_per_hour_micros if (p.name, "spot") in prices
                              else int(round(p.price_per_hour * 1e6))) for p in cfg.pools}
    by_account: dict[str, int] = {}
    for j in snap.jobs:  # jobs that hold a cloud partition after this cycle, not yet on a lease
        if not j.is_pending or j.job_id in leased:
            continue
        kept = [p for p in j.partitions if p in price_of and (j.job_id, p) not in revoked]
        new = [e.partition for e in d.eligible if e.job_id == j.job_id]
        for part in kept + new:
            by_account[j.account] = by_account.get(j.account, 0) + _job_cost(j, price_of[part], cfg)
    for acct, cost in by_account.items():
        limit = account_limit(bk, acct, cfg)
        assert limit is not None, f"{acct} has no budget but got a cloud partition"
        ab = bk.accounts.get(acct)
        spent = ab.spent_micros if ab else 0
        assert spent + commit.accounts.get(acct, 0) + cost <= limit, acct
    s_lim = site_limit(bk, cfg)
    if s_lim is not None and by_account:
        assert bk.site_spent_micros + commit.site + sum(by_account.values()) <= s_lim
    return d


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_no_decided_launch_takes_an_account_or_the_site_past_its_budget(world):
    cfg, bk, snap, leases, drift = world
    _check_no_overspend(cfg, bk, snap, leases, {})
    # prices move between cycles: the next cycle still never decides past the budget
    _check_no_overspend(cfg, bk, snap, leases, drift)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_the_launch_guard_accepts_every_launch_decide_made_in_order(world):
    cfg, bk, snap, leases, _ = world
    d = decide(snap, leases, bk, {}, cfg)
    jobs = {j.job_id: j for j in snap.jobs}
    launched = list(leases)
    for k, e in enumerate(d.eligible):
        job = jobs[e.job_id]
        if job.array_tasks:  # the daemon launches arrays task by task; the guard sees each task alone
            continue
        price = int(round(cfg.pool(e.pool).price_per_hour * 1e6))
        v = guard_launch(bk, launched, snap.jobs, account=job.account, price_per_hour_micros=price,
                         nodes=max(job.node_count, 1), seconds=launch_seconds(job.time_limit_min * 60.0, cfg),
                         now=NOW, config=cfg)
        assert v.ok, (v.reason, e)
        for n in range(max(job.node_count, 1)):
            launched.append(dataclasses.replace(lease(9000 + 10 * k + n, pool=e.pool, account=job.account,
                                                      price=price / 1e6, job_ids=(job.job_id,))))


def test_the_guard_refuses_what_does_not_fit_and_names_the_account():
    cfg = config()
    v = guard_launch(book({"chem": 1.0}), [], [], account="chem", price_per_hour_micros=1_000_000, nodes=2,
                     seconds=3600, now=NOW, config=cfg)
    assert not v.ok and v.reason.startswith("account chem has $1.00 left this month")
    v = guard_launch(book({"chem": 10.0}), [], [], account="chem", price_per_hour_micros=1_000_000, nodes=2,
                     seconds=3600, now=NOW, config=cfg)
    assert v.ok and v.account_left_micros == 10_000_000
