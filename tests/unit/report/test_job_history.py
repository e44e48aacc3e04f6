"""A burst job's story from burstd's records (issue 26): where it ran, preemptions, requeues, cost by market."""

from __future__ import annotations

import pytest

from burstd.domain.budget import Allocation, SpendInterval
from burstd.domain.lease import Lease, LeaseEvent, LeaseState
from burstd.report.job_history import job_histories, select_histories

S = LeaseState
T = 1_773_144_000.0
SPOT = Lease("L1", "aws-spot", "cloud3", S.TERMINATED, market="spot", created_at=T, ended_at=T + 900,
             state_since=T + 900, job_ids=(42,))
OD = Lease("L2", "aws-od", "cloud4", S.TERMINATED, market="on-demand", created_at=T + 1000, ended_at=T + 4000,
           state_since=T + 4000, job_ids=(42,))
LIVE = Lease("L3", "aws-spot", "cloud5", S.READY, market="spot", created_at=T + 2000, state_since=T + 2100,
             job_ids=(43,))
ALLOC = {"L1": [Allocation(42, T + 100, None, "chem", "alice")],  # never closed: the lease ended under it
         "L2": [Allocation(42, T + 1100, T + 3900, "chem", "alice")],
         "L3": [Allocation(43, T + 2200, None, "bio", "bob")]}
SPEND = [SpendInterval("L1", "aws-spot", "chem", T + 100, T + 800, 360_000, 70_000, 42, "alice"),
         SpendInterval("L1", "aws-spot", "chem", T, T + 100, 360_000, 10_000, None, None),  # overhead
         SpendInterval("L2", "aws-od", "chem", T + 1100, T + 3900, 1_000_000, 777_778, 42, "alice"),
         SpendInterval("L3", "aws-spot", "bio", T + 2200, T + 2800, 360_000, 60_000, 43, "bob"),
         SpendInterval("L9", "aws-spot", "bio", T, T + 10, 360_000, 5, 43, "bob")]  # not one of these leases
EVENTS = [LeaseEvent("L1", T + 800, S.DRAINING, S.FAILED, "preempted: notice deadline 1773144800 passed",
                     {"requeue": [42]}),
          LeaseEvent("L1", T + 810, S.FAILED, S.TERMINATING, "preempted (notice deadline passed)")]


def test_a_preempted_job_that_finished_on_demand():
    h = {x.job_id: x for x in job_histories([SPOT, OD, LIVE], ALLOC, SPEND, EVENTS)}
    job = h[42]
    assert [(r.node, r.pool, r.market, r.ended_by) for r in job.runs] == [
        ("cloud3", "aws-spot", "spot", "preempted"), ("cloud4", "aws-od", "on-demand", "")]
    assert job.runs[0].end == T + 900  # an open allocation ends with its lease
    assert (job.preemptions, job.requeues, job.state) == (1, 1, "ended")
    assert job.cost_by_market == {"spot": 70_000, "on-demand": 777_778} and job.cost_micros == 847_778
    assert job.sentence() == ("job 42 (chem/alice): ran on cloud3 (aws-spot, spot), then cloud4 (aws-od, "
                              "on-demand), preempted once, requeued once, cost $0.85 (on-demand $0.78, spot $0.07)")
    d = job.as_dict()
    assert d["nodes"] == ["cloud3", "cloud4"] and d["last_end"] == T + 3900 and d["cost_micro_usd"] == 847_778
    assert h[43].state == "running" and h[43].sentence() == "job 43 (bio/bob): running on cloud5 (aws-spot, " \
                                                            "spot), cost $0.06 so far"


def test_a_node_lost_without_notice_is_a_requeue_not_a_preemption():
    lost = [LeaseEvent("L1", T + 800, S.READY, S.FAILED, "instance vanished (preempted or deleted outside burstd)",
                       {"requeue": [42]})]
    job = {x.job_id: x for x in job_histories([SPOT], ALLOC, [], lost)}[42]
    assert (job.preemptions, job.requeues) == (0, 1) and "its node lost otherwise once" in job.sentence()


def test_filters():
    hs = job_histories([SPOT, OD, LIVE], ALLOC, SPEND, EVENTS)
    assert [h.job_id for h in hs] == [43, 42]  # newest first
    assert [h.job_id for h in select_histories(hs, account="chem")] == [42]
    assert [h.job_id for h in select_histories(hs, user="bob", state="running")] == [43]
    assert [h.job_id for h in select_histories(hs, since=T + 5000)] == [43]  # 42 ended before
    assert [h.job_id for h in select_histories(hs, job=42)] == [42]
    with pytest.raises(ValueError, match="state 'done'"):
        select_histories(hs, state="done")
