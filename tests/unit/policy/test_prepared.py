"""decide() with a ``Prepared`` kept across cycles (what the simulator does) decides exactly as a fresh one,
and the guard's commitment of a multi-node job's alike leases is the per-lease sum."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from decide_world import NOW, world  # noqa: E402

from burstd.domain.lease import Lease, LeaseState  # noqa: E402
from burstd.domain.slurm import Job  # noqa: E402
from burstd.policy.budget import committed_spend, cost_micros, lease_commitment_s, quote_price  # noqa: E402
from burstd.policy.context import Prepared  # noqa: E402
from burstd.policy.decide import decide  # noqa: E402


def outcome(d) -> tuple:
    return (d.eligible, d.revoke, d.prewarm, d.release, dict(d.markets), dict(d.explanations.items()))


@pytest.mark.parametrize("kind", ["burstd", "compute", "none"])
def test_a_prepared_decide_decides_as_a_fresh_one_cycle_after_cycle(kind):
    snap, leases, book, cfg = world(1500, 150)
    pol = cfg.policy
    cfg = cfg.model_copy(update={"policy": pol.model_copy(update={
        "waiting": pol.waiting.model_copy(update={"kind": kind})})})
    prepared = Prepared(cfg, None)
    for step, dt in enumerate((0.0, 600.0, 3600.0, 7200.0)):
        # the queue moves between cycles: every third pending job leaves, time passes
        jobs = tuple(j for j in snap.jobs if j.state != "PENDING" or j.job_id % 3 != step % 3)
        now_snap = replace(snap, taken_at=NOW + dt, jobs=jobs)
        fresh = decide(now_snap, leases, book, None, cfg, NOW + dt)
        reused = decide(now_snap, leases, book, None, cfg, NOW + dt, prepared=prepared)
        assert outcome(reused) == outcome(fresh)
        assert fresh.eligible  # the comparison covers bursts, not only jobs that stay


def test_a_prepared_built_from_another_config_or_price_list_is_refused():
    snap, leases, book, cfg = world(10, 10)
    other = cfg.model_copy()
    with pytest.raises(ValueError, match="another config or price list"):
        decide(snap, leases, book, None, cfg, prepared=Prepared(other, None))
    with pytest.raises(ValueError, match="another config or price list"):
        decide(snap, leases, book, {}, cfg, prepared=Prepared(cfg, None))


def test_alike_leases_of_a_multi_node_job_commit_the_per_lease_sum():
    _, _, _, cfg = world(1, 1)
    jobs = {1: Job(1, "a", "u", "chem", ("cloud-cpu",), "RUNNING", start_time=int(NOW - 600),
                   time_limit_min=90, node_count=3, cpus=96),
            2: Job(2, "b", "u", "bio", ("cloud-gpu",), "RUNNING", start_time=int(NOW - 60),
                   time_limit_min=600, node_count=2, cpus=192)}

    def lease(i, pool, job, account, price, state=LeaseState.READY):
        return Lease(f"L{i}", pool, f"x{i}", state, price_per_hour_micros=price, launched_at=NOW - 600,
                     job_ids=(job,), account=account)

    leases = ([lease(i, "cpu-spot", 1, "chem", 600_000) for i in range(3)]
              + [lease(3, "cpu-spot", 1, "chem", 700_000)]  # launched at another price: its own group
              + [lease(4 + i, "gpu-spot", 2, "bio", 11_800_000) for i in range(2)]
              + [lease(9, "gpu-spot", 2, "bio", 11_800_000, LeaseState.TERMINATED)])  # not live: not counted
    got = committed_spend(leases, jobs, NOW, cfg)
    site = rate = 0
    accounts: dict[str, int] = {}
    nodes: dict[str, int] = {}
    for ls in leases[:-1]:  # the rule, lease by lease
        price = max(ls.price_per_hour_micros, quote_price(None, ls.pool, ls.market, ls.price_per_hour_micros))
        cost = cost_micros(price, lease_commitment_s(ls, jobs, NOW, cfg))
        site, rate = site + cost, rate + price
        accounts[ls.account] = accounts.get(ls.account, 0) + cost
        nodes[ls.pool] = nodes.get(ls.pool, 0) + 1
    assert (got.site, got.rate_micros_per_hour, got.accounts, got.nodes_by_pool) == (site, rate, accounts, nodes)
    assert got.nodes_by_account == {"chem": 4, "bio": 2}
