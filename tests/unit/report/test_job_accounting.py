"""A finished job's story joined with Slurm's accounting (issue 26): its outcome as Slurm records it, every run
(sacct --duplicates) with the nodes it used, requeues burstd did not make (a job that requeued itself on a
preemption notice), and its cost by kind. The real 22.05 bed capture where it fits."""

from __future__ import annotations

import json
from pathlib import Path

from burstd.domain.budget import Allocation, SpendInterval
from burstd.domain.data import DataSpend
from burstd.domain.lease import Lease, LeaseEvent, LeaseState
from burstd.domain.sacct import SacctJob
from burstd.report.job_accounting import join_accounting
from burstd.report.job_history import job_histories
from burstd.slurm.sacct import jobs_from_json

S = LeaseState
T = 1_773_144_000.0
CLOUD = {"cloud1", "cloud2", "cloud3"}
BED = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05-bed" / "sacct" / "sacct_json.json"

# job 42 checkpoints on cloud1's spot notice and requeues itself (burstd requeues nothing: the FAILED event lists no
# job), then finishes on onprem1; job 43 ran on cloud2 and failed there
L1 = Lease("L1", "aws-spot", "cloud1", S.TERMINATED, market="spot", created_at=T, ended_at=T + 900,
           state_since=T + 900, job_ids=(42,))
L2 = Lease("L2", "aws-spot", "cloud2", S.TERMINATED, market="spot", created_at=T + 100, ended_at=T + 3000,
           state_since=T + 3000, job_ids=(43,))
ALLOC = {"L1": [Allocation(42, T + 100, T + 700, "chem", "alice")],
         "L2": [Allocation(43, T + 200, T + 2000, "bio", "bob")]}
EVENTS = [LeaseEvent("L1", T + 600, S.READY, S.DRAINING, "spot-interruption deadline 1773144800"),
          LeaseEvent("L1", T + 800, S.DRAINING, S.FAILED, "preempted: notice deadline 1773144800 passed")]
SPEND = [SpendInterval("L1", "aws-spot", "chem", T + 100, T + 700, 360_000, 60_000, 42, "alice"),
         SpendInterval("L2", "aws-spot", "bio", T + 200, T + 2000, 360_000, 180_000, 43, "bob")]
DATA = [DataSpend("x1", "transfer_in", "aws-spot", "chem", 10**9, T + 50, 20_000, 42, "alice"),
        DataSpend("x2", "storage", "aws-spot", "chem", 10**9, T + 900, 3_000, 42, "alice"),
        DataSpend("x3", "transfer_out", "aws-spot", "chem", 10**9, T + 900, 9_000, None, None)]  # no job
SACCT = [SacctJob(42, "chem", "alice", ("cloud1",), "REQUEUED", T + 90, T + 700),
         SacctJob(42, "chem", "alice", ("onprem1",), "COMPLETED", T + 1000, T + 4000),
         SacctJob(43, "bio", "bob", ("cloud2",), "FAILED", T + 190, T + 2000),
         SacctJob(44, "bio", "bob", ("onprem1",), "COMPLETED", T, T + 1)]  # not a burst job: no story


def _stories(rows, **kw):
    hs = job_histories([L1, L2], ALLOC, SPEND, EVENTS, DATA)
    return {h.job_id: h for h in join_accounting(hs, rows, CLOUD, **kw)}


def test_a_job_that_requeued_itself_on_a_notice_shows_its_requeue_preemption_and_outcome():
    before = {h.job_id: h for h in job_histories([L1, L2], ALLOC, SPEND, EVENTS, DATA)}
    assert (before[42].requeues, before[42].preemptions) == (0, 0)  # burstd's records alone: it requeued nothing
    job = _stories(SACCT)[42]
    assert (job.requeues, job.requeued_by_burstd, job.preemptions) == (1, 0, 1)
    assert job.runs[0].ended_by == "preempted"
    d = job.as_dict()
    assert d["outcome"] == "COMPLETED" and d["slurm"]["run_count"] == 2 and d["slurm"]["source"] == "sacct"
    assert [(r["nodes"], r["side"], r["state"]) for r in d["slurm"]["runs"]] == [
        (["cloud1"], "cloud", "REQUEUED"), (["onprem1"], "on-prem", "COMPLETED")]
    assert job.sentence() == (
        "job 42 (chem/alice): ran on cloud1 (aws-spot, spot), preempted once, requeued once, cost $0.08 (spot $0.06, "
        "transfer in $0.02, storage <$0.01); Slurm: COMPLETED after 2 runs: REQUEUED on cloud1 (cloud), then "
        "COMPLETED on onprem1 (on-prem)")


def test_cost_by_kind_splits_compute_from_data_and_totals_both():
    d = _stories(SACCT)[42].as_dict()
    assert d["cost_by_kind_micro_usd"] == {"compute": 60_000, "transfer_in": 20_000, "transfer_out": 0,
                                           "storage": 3_000}
    assert d["cost_by_market_micro_usd"] == {"spot": 60_000} and d["cost_micro_usd"] == 83_000


def test_a_failed_job_is_told_as_failed_not_ended():
    job = _stories(SACCT)[43]
    assert job.as_dict()["outcome"] == "FAILED" and (job.requeues, job.preemptions) == (0, 0)
    assert job.sentence().endswith("; Slurm: FAILED on cloud2 (cloud)")


def test_without_accounting_it_says_so_and_still_counts_the_requeues_slurm_counted_live():
    hs = _stories(None, note="no slurmdbd (AccountingStorageType is accounting_storage/none)", restarts={42: 1})
    job = hs[42]
    assert job.as_dict()["outcome"] is None and job.as_dict()["slurm"]["source"] is None
    assert (job.requeues, job.preemptions) == (1, 1)  # restart_count: the run on the preempted node was cut short
    assert job.sentence().endswith("; Slurm's accounting: no slurmdbd (AccountingStorageType is "
                                   "accounting_storage/none)")
    assert (hs[43].requeues, hs[43].preemptions) == (0, 0)  # no evidence of a requeue: none invented


def test_a_job_sacct_does_not_list_says_so():
    job = _stories([])[42]
    assert job.as_dict()["outcome"] is None and "sacct lists no run of it" in job.sentence()


def test_the_bed_capture_a_cloud_job_requeued_then_cancelled_and_an_array_task():
    """22.05 bed: job 4 ran on cloud1, was requeued while its node powered up and then cancelled (one record,
    REQUEUED); array task 5_0 ran as job 7; job 2 was requeued on-prem (two records)."""
    rows = jobs_from_json(json.loads(BED.read_text()))
    t = 1795708332.0
    lease = Lease("L4", "local", "cloud1", S.TERMINATED, created_at=t - 30, ended_at=t + 60, state_since=t + 60,
                  job_ids=(4,))
    allocs = {"L4": [Allocation(4, t, t + 51, "physics", "burstuser"), Allocation(7, t, t + 1, "physics", "u")]}
    hs = {h.job_id: h for h in join_accounting(job_histories([lease], allocs, [], []), rows, {"cloud1"})}
    four = hs[4].as_dict()
    assert (four["outcome"], four["requeues"], four["slurm"]["runs"][0]["side"]) == ("REQUEUED", 1, "cloud")
    assert hs[7].as_dict()["slurm_id"] == "5_0" and hs[7].sentence().startswith("job 5_0 (physics/u)")
    onprem_twice = join_accounting(job_histories([lease], {"L4": [Allocation(2, t, None, "physics", "u")]}, [], []),
                                   rows, {"cloud1"})[0]
    assert onprem_twice.requeues == 1 and onprem_twice.as_dict()["outcome"] == "COMPLETED"
