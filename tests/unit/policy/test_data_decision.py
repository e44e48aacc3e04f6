"""Issue 24 item 4: data in the decision. A job's declared inputs add their transfer time to its cloud start and
their transfer and storage cost to its bill; never-leave jobs stay home whatever the queue; data already near a
pool is credited. Real decide(), small clusters from policy_factories."""

from __future__ import annotations

from policy_factories import book, busy_cluster, pending, pool

from burstd.config import parse_config
from burstd.domain.data import DataItem, DataNeeds
from burstd.policy import decide
from burstd.policy.data_cost import DataView, data_move, stays_home

V5 = {"waiting": {"wait_value_per_hour": 5}, "progress_slack": 2.0}
LINK = {"link_mbps": 1000, "transfer_in_per_gb": 0.09, "transfer_out_per_gb": 0.09, "storage_per_gb_month": 0.023}
DIGEST = "sha256:" + "ab" * 32
GB = 10**9


def cfg(pools=None, policy=None, data=None, budget=None):
    return parse_config({"pools": pools or [pool(data=LINK)], "policy": policy or V5, "data": data or {},
                         "budget": budget or {}})


def reads(gb: float, digest: str | None = None, out_gb: float = 0, **kw) -> DataNeeds:
    outs = (DataItem("/proj/out", int(out_gb * GB)),) if out_gb else ()
    return DataNeeds((DataItem("/proj/imagenet", int(gb * GB), digest),), outs, **kw)


def run(snapshot, config=None, data=None, accounts=None):
    return decide(snapshot, [], book(accounts), None, config or cfg(), data=data)


def test_a_burst_pays_for_its_data_and_says_so():
    d = run(busy_cluster(pending(1)), data=DataView({1: reads(180)}))  # 10 h of on-prem wait
    assert [e.job_id for e in d.eligible] == [1]
    move = d.data_moves[1]
    assert (move.bytes_in, move.stage_in_s, move.transfer_micros) == (180 * GB, 1440.0, 16_200_000)
    # the budget is charged the compute ($1 spot x (1 h + boot + accrual)) and the data move together
    no_data = run(busy_cluster(pending(1)))
    assert d.eligible[0].expected_cost_micros == no_data.eligible[0].expected_cost_micros + move.cost_micros
    r = d.explanations[1].reason
    assert "moving 180 GB to aws-cpu: 24 min, $16.21" in r and r.endswith("burst"), r


def test_moving_the_data_is_worth_more_than_the_wait_so_the_job_stays_and_shows_both():
    snap = busy_cluster(pending(1), end_in_s=2 * 3600)  # 2 h of on-prem wait, worth ~$28
    assert [e.job_id for e in run(snap).eligible] == [1]  # without data it bursts
    d = run(snap, data=DataView({1: reads(500)}))  # $45 to move, 67 min over the link
    assert d.eligible == [] and d.kept_home_for_data == [1]
    r = d.explanations[1].reason
    # the wait it saves is 2 h less the boot and the 67 min of stage-in
    assert ("moving 500 GB to aws-cpu: 67 min, $45.02; waiting here: 2 h, worth $12.08 (the whole bill with the "
            "move: $46.10)") in r, r


def test_data_that_would_arrive_after_the_on_prem_start_keeps_the_job_home_even_without_the_value_rule():
    slow = cfg(pools=[pool(data={**LINK, "link_mbps": 10})], policy={"waiting": {"wait_value_per_hour": 0}})
    snap = busy_cluster(pending(1, waited_s=30 * 3600))  # 10 h of wait; 180 GB at 10 Mbit/s is 40 h
    assert [e.job_id for e in run(snap, slow).eligible] == [1]
    d = run(snap, slow, DataView({1: reads(180)}))
    assert d.eligible == [] and d.kept_home_for_data == [1]
    assert "its data would arrive after it could start on-prem" in d.explanations[1].reason


def test_data_already_near_a_pool_is_not_moved_or_billed_again():
    snap = busy_cluster(pending(1), end_in_s=2 * 3600)
    needs = reads(500, DIGEST)
    assert run(snap, data=DataView({1: needs})).eligible == []
    d = run(snap, data=DataView({1: needs}, near={"aws-cpu": {DIGEST}}))
    assert [e.job_id for e in d.eligible] == [1]
    assert (d.data_moves[1].bytes_in, d.data_moves[1].bytes_cached, d.data_moves[1].transfer_micros) == (0, 500 * GB, 0)
    assert "moving 0 B (500 GB already there) to aws-cpu: 0 s, $0.00" in d.explanations[1].reason


def test_the_pool_whose_data_move_is_cheaper_wins_over_cheaper_compute():
    pricey_link = pool("cheap", "cloud-a", "a", price=0.5, data={**LINK, "transfer_in_per_gb": 0.12})
    free_link = pool("near", "cloud-b", "b", price=1.0, data={**LINK, "transfer_in_per_gb": 0.0})
    two = cfg(pools=[pricey_link, free_link])
    assert run(busy_cluster(pending(1)), two).eligible[0].pool == "cheap"
    assert run(busy_cluster(pending(1)), two, DataView({1: reads(100)})).eligible[0].pool == "near"


def test_never_leave_jobs_stay_home_whatever_the_queue():
    snap = busy_cluster(pending(1, waited_s=400 * 3600), end_in_s=1e7)  # months of wait: anything else bursts
    for config, data, why in [
        (cfg(), DataView({1: reads(0.001, never_leaves=True)}), "the job declares #BURSTD data-never-leaves"),
        (cfg(data={"never_leave_accounts": ["chem"]}), None, "account chem is in data.never_leave_accounts"),
        (cfg(data={"never_leave_paths": ["/proj"]}), DataView({1: reads(1)}), "/proj/imagenet is under"),
        (cfg(), DataView({1: DataNeeds(held="its batch script is not read yet")}), "its batch script is not read"),
    ]:
        d = run(snap, config, data)
        assert d.eligible == [] and d.kept_home_for_data == [1], why
        assert f"stays on-prem: its data never leaves the site ({why}" in d.explanations[1].reason
    # a prefix matches whole path components only
    assert stays_home(reads(1), "chem", cfg(data={"never_leave_paths": ["/pro"]}).data) == ""
    # an already-eligible never-leave job loses its cloud partition
    eligible = busy_cluster(pending(1, partitions=("batch", "cloud")))
    d = run(eligible, data=DataView({1: reads(1, never_leaves=True)}))
    assert [r.partition for r in d.revoke] == ["cloud"]


def test_the_data_move_counts_against_the_accounts_budget():
    snap = busy_cluster(pending(1))
    assert run(snap, accounts={"chem": 10.0}).eligible != []  # $1.08 of compute fits in $10
    d = run(snap, data=DataView({1: reads(180)}), accounts={"chem": 10.0})  # + $16.21 of data does not
    assert d.eligible == [] and "account chem has $10.00 left this month, the job needs $17.31" in d.explanations[1].reason


def test_a_job_that_declares_nothing_is_told_its_paths_are_not_on_the_cloud_node():
    d = run(busy_cluster(pending(1)), data=DataView({}))
    assert "declared no data: on-prem paths" in d.explanations[1].reason
    assert "declared no data" not in run(busy_cluster(pending(1))).explanations[1].reason  # no data view: silent


def test_data_move_figures():
    p = cfg().pools[0].data
    m = data_move(reads(180, out_gb=20), "aws-cpu", p, (), 30 * 86400.0)
    # in and out at $0.09/GB; 200 GB kept near the pool for a month at $0.023/GB-month
    assert (m.transfer_micros, m.storage_micros, m.stage_in_s) == (18_000_000, 4_600_000, 1440.0)
    unmetered = data_move(reads(180), "x", cfg(pools=[pool()]).pools[0].data, (), 3600)
    assert (unmetered.stage_in_s, unmetered.cost_micros, unmetered.moves_anything) == (0.0, 0, True)
