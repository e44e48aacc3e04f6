"""decide(): each input it weighs changes the outcome the way docs/policy.md says."""

from __future__ import annotations

import math

import pytest
from policy_factories import NOW, book, busy_cluster, config, lease, onprem_nodes, pending, pool, running

from burstd.domain.budget import PriceQuote
from burstd.domain.slurm import Gres, Snapshot
from burstd.policy import BudgetError, PriceError, decide


def one(snapshot, cfg=None, bk=None, prices=None, leases=()):
    d = decide(snapshot, list(leases), bk or book(), prices, cfg or config())
    return d


def test_long_expected_wait_and_money_left_bursts_with_a_sentence_that_has_the_figures():
    d = one(busy_cluster(pending(1, waited_s=14 * 60)))
    assert [(e.job_id, e.pool, e.partition) for e in d.eligible] == [(1, "aws-cpu", "cloud")]
    ex = d.explanations[1]
    assert ex.burst and ex.pool == "aws-cpu"
    assert ex.reason.startswith("waited 14 min, expected on-prem start in 10 h, account chem has $1,000.00 left")
    assert ex.reason.endswith("pool aws-cpu at $1.00/node-h: burst")


@pytest.mark.parametrize(
    "job, cfg_kw, expect_in_reason",
    [
        (pending(1, comment="burst:no"), {}, "opted out"),
        (pending(1, account="secret"), {"policy": {"exclude_accounts": ["secret"]}}, "account secret is excluded"),
        (pending(1, user="bob"), {"policy": {"exclude_users": ["bob"]}}, "user bob is excluded"),
        (pending(1, reason="Dependency"), {}, "pending for Dependency"),
        (pending(1, priority=1), {"policy": {"min_priority": 50}}, "below min_priority"),
        (pending(1, restart_count=4), {}, "on-prem only"),
        (pending(1, cpus=16), {}, "needs 16 CPUs a node"),
        (pending(1, memory_mb=64000), {}, "MiB a node"),
        (pending(1, gres=(Gres("gpu", "a100", 1),)), {}, "needs 1 GPUs a node"),
        (pending(1, features="ib"), {}, "needs features ib"),
        (pending(1, required_nodes="onprem1"), {}, "asks for nodes onprem1 (sbatch -w); onprem1 not in pool aws-cpu"),
        (pending(1, required_nodes="c[1-2],onprem3"), {}, "; onprem3 not in pool aws-cpu"),
        (pending(1, required_nodes="c99"), {}, "; c99 not in pool aws-cpu"),  # past the pool's node_count
        (pending(1, excluded_nodes="c[1-20]"), {}, "excludes nodes c[1-20] of pool aws-cpu (sbatch -x); 0 of its"),
        (pending(1, excluded_nodes="c[1-19],onprem1", node_count=2), {}, "; 1 of its nodes left, the job needs 2"),
        (pending(1, excluded_nodes="c[1-"), {}, "excludes nodes c[1- (sbatch -x), a list burstd cannot read"),
        (pending(1, reservation="maint"), {}, "it runs in reservation maint (sbatch --reservation), which holds no"),
        (pending(1, reservation="maint,course"), {}, "in reservation maint,course (sbatch --reservation)"),
        (pending(1, account="bio"), {}, "account bio has no budget"),
        (pending(1, limit_min=None), {}, "no time limit"),
        (pending(1), {"policy": {"paused": True}}, "bursting is paused"),
        (pending(1, waited_s=10), {"policy": {"waiting": {"kind": "constant", "min_wait_s": 600}}},
         "waiting policy constant wants 10 min"),
        (pending(1), {"policy": {"min_wait_s_by_qos": {"long": 7200}}, }, None),
    ],
)
def test_each_gate_keeps_the_job_home_and_says_why(job, cfg_kw, expect_in_reason):
    cfg = config(**cfg_kw)
    d = one(busy_cluster(job), cfg)
    if expect_in_reason is None:  # the QOS floor does not touch a job of another QOS
        assert d.eligible
        return
    assert d.eligible == []
    assert not d.explanations[1].burst
    assert expect_in_reason in d.explanations[1].reason


def test_a_job_that_names_the_pools_own_nodes_bursts():
    d = one(busy_cluster(pending(1, required_nodes="c[1-2]", node_count=2)))
    assert [(e.job_id, e.pool) for e in d.eligible] == [(1, "aws-cpu")], d.explanations[1].reason


@pytest.mark.parametrize("reservation", ["burstd_burstd", "maint,burstd_burstd"])
def test_a_job_that_asks_for_burstds_own_reservation_bursts(reservation):
    # burstd's MAGNETIC reservation over the cloud nodes is burstd_<cluster id> (the default id is "burstd")
    d = one(busy_cluster(pending(1, reservation=reservation)))
    assert [e.job_id for e in d.eligible] == [1], d.explanations[1].reason


def test_a_job_in_another_reservation_loses_the_cloud_partition_it_had():
    job = pending(1, reservation="maint", partitions=("batch", "cloud"))
    d = one(busy_cluster(job))
    assert not d.eligible and [(r.job_id, r.partition) for r in d.revoke] == [(1, "cloud")]


@pytest.mark.parametrize("excluded", ["c[1-19]", "c[1-19],onprem[1-4]", "onprem[1-4]", "c01,c0,c21"])
def test_a_job_that_leaves_enough_of_the_pool_bursts(excluded):
    # Slurm starts it on the nodes it did not exclude; "c01", "c0" and "c21" are no node of the pool (c1..c20)
    d = one(busy_cluster(pending(1, excluded_nodes=excluded)))
    assert [(e.job_id, e.pool) for e in d.eligible] == [(1, "aws-cpu")], d.explanations[1].reason


def test_two_jobs_of_one_shape_are_fitted_by_their_own_node_lists():
    # the fit is cached by job shape: the node list is part of the shape
    d = one(busy_cluster(pending(1, required_nodes="onprem1"), pending(2), pending(3, required_nodes="c1")))
    assert {e.job_id for e in d.eligible} == {2, 3}
    assert "asks for nodes onprem1" in d.explanations[1].reason
    d = one(busy_cluster(pending(1, excluded_nodes="c[1-20]"), pending(2), pending(3, excluded_nodes="c[2-20]")))
    assert {e.job_id for e in d.eligible} == {2, 3}
    assert "excludes nodes c[1-20]" in d.explanations[1].reason


def test_a_job_too_big_for_on_prem_bursts_after_the_floor_only():
    d = one(busy_cluster(pending(1, cpus=80, node_count=10, limit_min=600, waited_s=1)))
    assert d.eligible and "expected on-prem start never" in d.explanations[1].reason


def test_a_job_that_would_start_soon_on_prem_stays_home():
    snap = busy_cluster(pending(1), end_in_s=120)  # the cluster frees up in 2 minutes
    d = one(snap)
    assert d.eligible == []
    assert "expected on-prem start in 2 min" in d.explanations[1].reason


def test_slurm_backfill_estimate_wins_over_the_model():
    soon = pending(1, start_time=int(NOW + 60))
    d = one(busy_cluster(soon))  # the model alone says 10 h
    assert d.eligible == [] and "in 60 s" in d.explanations[1].reason


def test_big_jobs_wait_longer_than_small_ones_under_compute_wait():
    cfg = config(policy={"waiting": {"kind": "compute", "min_wait_s": 60, "wait_per_node_hour_s": 600}})
    small = pending(1, cpus=8, limit_min=60, waited_s=900)
    big = pending(2, cpus=80, limit_min=600, waited_s=900, node_count=10)
    d = one(busy_cluster(small, big, nodes=12), cfg)
    assert [e.job_id for e in d.eligible] == [1]
    assert "wants 6 h" in d.explanations[2].reason  # 10 nodes x 10 h x 600 s capped at max_wait_s


def test_escalation_after_spot_preemptions_goes_on_demand_then_home():
    # preempted, nothing kept, 1 h after its submission: behind the default line (half its 1 h limit by now)
    late = pending(1, restart_count=2)
    d = one(busy_cluster(late))
    assert d.eligible[0].market == "on-demand"
    assert "on-demand: burst" in d.explanations[1].reason
    # 10 min after its submission it is still within a boot and a restart of its line: spot again
    assert one(busy_cluster(pending(1, restart_count=2, waited_s=600))).eligible[0].market == "spot"
    d = one(busy_cluster(late), config(pools=[pool(ondemand=None)]))
    assert d.eligible == [] and "on-demand only" in d.explanations[1].reason


def test_spot_vs_on_demand_follows_price_and_interruption_risk():
    cheap_but_risky = {("aws-cpu", "spot"): PriceQuote("aws-cpu", "spot", 2_500_000, interruption_rate=2.0),
                       ("aws-cpu", "on-demand"): PriceQuote("aws-cpu", "on-demand", 3_000_000)}
    d = one(busy_cluster(pending(1)), prices=cheap_but_risky)
    assert d.eligible[0].market == "on-demand"
    calm = {("aws-cpu", "spot"): PriceQuote("aws-cpu", "spot", 2_500_000, interruption_rate=0.01)}
    assert one(busy_cluster(pending(1)), prices=calm).eligible[0].market == "spot"


def test_cheapest_fitting_pool_is_chosen_and_gpu_type_must_match():
    cfg = config(pools=[pool("a100", "cloud-a", "a", gpus=8, gpu_type="a100", price=12.0, ondemand=None),
                        pool("v100", "cloud-v", "v", gpus=8, gpu_type="v100", price=5.0, ondemand=None)])
    job = pending(1, gres=(Gres("gpu", "a100", 4),))
    d = one(busy_cluster(job), cfg)
    assert d.eligible[0].pool == "a100"
    d = one(busy_cluster(pending(1, gres=(Gres("gpu", None, 4),))), cfg)
    assert d.eligible[0].pool == "v100"


def test_pool_node_cap_counts_live_leases_and_this_cycles_decisions():
    cfg = config(pools=[pool(max_nodes=3)])
    jobs = [pending(i, priority=100 - i) for i in range(1, 5)]
    d = one(busy_cluster(*jobs), cfg, leases=[lease(1, job_ids=())])
    assert [e.job_id for e in d.eligible] == [1, 2]
    assert "pool aws-cpu is full (3/3 nodes)" in d.explanations[3].reason


def test_account_node_cap():
    cfg = config(policy={"max_nodes_per_account": {"chem": 1}})
    d = one(busy_cluster(pending(1), pending(2)), cfg)
    assert [e.job_id for e in d.eligible] == [1]
    assert "cloud node cap (1)" in d.explanations[2].reason


def test_budget_counts_committed_spend_of_running_leases():
    # $8 budget; a running cloud job with 5 h left at $1/h commits ~$5.03 (+ accrual); a 1 h job needs $1.10
    cloud_job = running(50, partition="cloud", end_in_s=5 * 3600, limit_min=301)
    snap = Snapshot(NOW, busy_cluster().jobs + (cloud_job, pending(1), pending(2), pending(3), pending(4)),
                    onprem_nodes())
    d = one(snap, bk=book({"chem": 8.0}), leases=[lease(1, job_ids=(50,))])
    assert [e.expected_cost_micros for e in d.eligible] == [1_100_000, 1_100_000]
    refused = [e for e in d.explanations.values() if not e.burst]
    assert refused and "account chem has $" in refused[0].reason and "the job needs" in refused[0].reason


def test_site_budget_and_burn_rate_cap():
    d = one(busy_cluster(pending(1)), bk=book(site=0.5))
    assert d.eligible == [] and "the site has $0.50 left" in d.explanations[1].reason
    d = one(busy_cluster(pending(1), pending(2)), bk=book(burn=1.5))
    assert len(d.eligible) == 1 and "burn rate" in d.explanations[2].reason


def test_eligible_job_no_longer_worth_it_loses_the_cloud_partition():
    job = pending(1, partitions=("batch", "cloud"))
    d = one(busy_cluster(job), bk=book({"chem": 0.0}))
    assert [(r.job_id, r.partition) for r in d.revoke] == [(1, "cloud")]
    assert d.eligible == []
    # still worth it: no decision at all, but the explanation says it bursts
    d = one(busy_cluster(job))
    assert d.is_empty() and d.explanations[1].burst


def test_paused_releases_idle_cloud_nodes_and_revokes():
    from burstd.domain.slurm import Node
    idle = Node("c1", "IDLE", flags=("CLOUD",), partitions=("cloud",), cpus=8)
    snap = Snapshot(NOW, busy_cluster(pending(1, partitions=("batch", "cloud"))).jobs, onprem_nodes() + (idle,))
    d = one(snap, config(policy={"paused": True}))
    assert [r.node for r in d.release] == ["c1"] and [r.job_id for r in d.revoke] == [1]


def test_every_pending_job_considered_gets_an_explanation():
    jobs = [pending(i, account=("chem" if i % 2 else "bio"), comment=("burst:no" if i % 3 == 0 else ""))
            for i in range(1, 40)]
    d = one(busy_cluster(*jobs))
    assert set(d.explanations) == {j.job_id for j in jobs}


def test_array_record_costs_every_task():
    arr = pending(1, array_tasks="0-99")  # 100 one-hour tasks at $1 = $100+ > $50
    cfg = config(policy={"waiting": {"kind": "none"}})
    d = one(busy_cluster(arr), cfg, bk=book({"chem": 50.0}))
    assert d.eligible == [] and "the job needs $110.00" in d.explanations[1].reason
    d = one(busy_cluster(arr), cfg, bk=book({"chem": 500.0}))  # throttle-free array of 100 on a 20-node pool: fits
    assert d.eligible[0].expected_cost_micros == 110_000_000


@pytest.mark.parametrize("bad", [
    lambda: book({"chem": -1.0}),
])
def test_negative_budget_is_a_clear_error(bad):
    with pytest.raises(BudgetError, match="account chem: budget is negative"):
        one(busy_cluster(pending(1)), bk=bad())


def test_nan_price_or_interruption_rate_is_a_clear_error():
    with pytest.raises(PriceError, match="pool aws-cpu"):
        one(busy_cluster(pending(1)), prices=[PriceQuote("aws-cpu", "spot", 1_000_000, interruption_rate=math.nan)])
    with pytest.raises(PriceError, match="pool aws-cpu"):
        one(busy_cluster(pending(1)), prices=[PriceQuote("aws-cpu", "spot", -5)])


def test_without_a_budget_book_the_config_budgets_decide():
    cfg = config(budget={"accounts": {"chem": 100.0}})
    d = decide(busy_cluster(pending(1), pending(2, account="bio")), [], None, None, cfg)
    assert [e.job_id for e in d.eligible] == [1]
    assert "account chem has $100.00 left" in d.explanations[1].reason


def test_prewarm_only_with_new_demand_and_within_cap_and_site_budget():
    cfg = config(pools=[pool(max_nodes=3)], policy={"prewarm_nodes": 5})
    d = one(busy_cluster(pending(1)), cfg)
    assert [(p.pool, p.count) for p in d.prewarm] == [("aws-cpu", 2)]  # 3-node cap, 1 taken by the job
    assert one(busy_cluster(pending(1, comment="burst:no")), cfg).prewarm == []
    assert one(busy_cluster(pending(1)), cfg, bk=book(site=1.2)).prewarm == []  # idle nodes would overspend


def test_an_escalated_job_goes_home_while_its_on_prem_start_is_near_next_to_its_run_time():
    # the rule before the value of waiting (wait_value_per_hour = 0), with the fixed preemption count:
    # expected on-prem start in 10 h; time limit 1 h; preempted twice, so on-demand only
    old = {"max_preemptions_spot": 2, "progress_slack": 0}
    job = pending(1, restart_count=2)
    stays = one(busy_cluster(job), config(policy={**old, "waiting": {"escalated_wait_to_runtime_ratio": 20,
                                                                     "wait_value_per_hour": 0}}))
    assert stays.eligible == []
    assert "preempted 2 times, so on-demand only" in stays.explanations[1].reason
    assert "sooner than 20 h" in stays.explanations[1].reason
    goes = one(busy_cluster(job), config(policy={**old, "waiting": {"escalated_wait_to_runtime_ratio": 5,
                                                                    "wait_value_per_hour": 0}}))
    assert [e.market for e in goes.eligible] == ["on-demand"]
    # not escalated yet (spot still allowed): the knob does not apply
    fresh = one(busy_cluster(pending(1, restart_count=1)),
                config(policy={**old, "waiting": {"escalated_wait_to_runtime_ratio": 20, "wait_value_per_hour": 0}}))
    assert [e.market for e in fresh.eligible] == ["spot"]
    # a baseline waiting policy ignores it (compute-wait keeps its published definition)
    base = one(busy_cluster(job), config(policy={**old, "waiting": {"kind": "compute", "min_wait_s": 60,
                                                             "escalated_wait_to_runtime_ratio": 20}}))
    assert [e.market for e in base.eligible] == ["on-demand"]


def test_explanations_are_rendered_only_when_read_and_cover_every_pending_job():
    from burstd.domain.decisions import Explanation, ExplanationMap

    calls = []

    def render(jid, text):
        calls.append(jid)
        return Explanation(jid, False, None, text)

    m = ExplanationMap()
    m.put(7, render, 7, "stays")
    m[8] = Explanation(8, True, "p", "burst")
    assert calls == [] and len(m) == 2 and 7 in m and set(m) == {7, 8}
    assert m[7].reason == "stays" and m[7].reason == "stays" and calls == [7]  # rendered once, kept
    assert dict(m.items()) == {7: Explanation(7, False, None, "stays"), 8: Explanation(8, True, "p", "burst")}
    d = one(busy_cluster(pending(1), pending(2, waited_s=10), pending(3, comment="burst:no")))
    assert isinstance(d.explanations, ExplanationMap)
    assert set(d.explanations) == {1, 2, 3}
    assert "opted out" in d.explanations[3].reason and d.explanations[1].burst


def test_spot_hours_restart_model():
    from burstd.policy.offers import spot_hours

    assert spot_hours(0.0, 8, 7200, 3600, 300) == pytest.approx(2 + 300 / 3600)  # no risk: work + one boot
    one_node, eight = spot_hours(0.3, 1, 36000, 3600, 120), spot_hours(0.3, 8, 36000, 3600, 120)
    assert 10 < one_node < 13 and eight > 3 * one_node  # a job's risk grows with its node count
    assert spot_hours(0.3, 8, 36000, 1800, 120) < eight  # checkpointing more often loses less
    assert spot_hours(0.3, 1000, 36000, 3600, 120) == math.inf


def test_a_big_long_job_on_a_volatile_spot_market_goes_on_demand_from_the_start():
    prices = [PriceQuote("aws-cpu", "spot", 1_000_000, 0.3), PriceQuote("aws-cpu", "on-demand", 3_000_000, 0.0)]
    small = pending(1, cpus=8, limit_min=600)
    big = pending(2, cpus=64, node_count=8, limit_min=600)
    snap = busy_cluster(small, big, nodes=16)
    d = one(snap, config(policy={"waiting": {"kind": "none"}, "risk_aware_market": True}), prices=prices)
    assert {e.job_id: e.market for e in d.eligible} == {1: "spot", 2: "on-demand"}
    plain = one(snap, config(policy={"waiting": {"kind": "none"}, "risk_aware_market": False}), prices=prices)
    assert {e.job_id: e.market for e in plain.eligible} == {1: "spot", 2: "spot"}


def test_a_pool_that_is_on_demand_by_configuration_is_not_an_escalation():
    # the cheapest fit is an on-demand-only pool; spot elsewhere costs more: no escalation, so it bursts
    cfg = config(pools=[pool("od", "cloud-od", "o", price=2.0, ondemand=None, market="on-demand"),
                        pool("sp", "cloud-sp", "s", price=5.0, ondemand=None)],
                 policy={"waiting": {"escalated_wait_to_runtime_ratio": 100}})
    d = one(busy_cluster(pending(1)), cfg)
    assert [(e.pool, e.market) for e in d.eligible] == [("od", "on-demand")]


@pytest.mark.parametrize("waiting", [{"kind": "constant", "min_wait_s": 600}, {"burstd_min_wait_s": 120}])
def test_a_preempted_job_requeued_with_its_cloud_partition_is_not_made_to_wait_again(waiting):
    # requeued 5 s ago after its cloud node was reclaimed: Slurm reset its eligible time, but it qualified already
    cfg = config(policy={"waiting": waiting})
    requeued = pending(1, partitions=("batch", "cloud"), restart_count=1, eligible_time=int(NOW - 5))
    d = one(busy_cluster(requeued), cfg)
    assert d.revoke == [] and d.markets[1][0] == "aws-cpu" and d.explanations[1].burst
    # the same wait on a job never preempted still meets the gate (keeping its partition), and so does a job
    # requeued while it was on-prem only (it never qualified)
    fresh = pending(1, partitions=("batch", "cloud"), waited_s=5)
    assert [r.job_id for r in one(busy_cluster(fresh), cfg).revoke] == [1]
    home = pending(1, restart_count=1, waited_s=5)
    d = one(busy_cluster(home), cfg)
    assert d.eligible == [] and not d.explanations[1].burst
