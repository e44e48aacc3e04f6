"""``burstctl jobs`` and ``explain`` of finished jobs joined with Slurm's accounting (issue 26): the real control
API and SQLite Store (tests/integration/live_api.py), Slurm faked by ``FakeAdapter`` whose ``sacct_jobs`` selects
as sacct does. A training job that requeued itself on a spot notice, an array task by its Slurm id, a site
without slurmdbd, sacct failing, cost by kind."""

from __future__ import annotations

import dataclasses
import json

from burstd.domain.budget import Allocation, SpendInterval
from burstd.domain.data import DataSpend
from burstd.domain.sacct import SacctJob
from burstd.domain.slurm import Job
from burstd.slurm.base import SlurmError
from tests.integration import test_jobs_cli

cli, live = test_jobs_cli.cli, test_jobs_cli.live  # burstctl on the real control API and SQLite Store (the fixture)

T = 1_773_144_000.0
A, B = "a" * 32, "b" * 32


def _lease(store, lid, node, job, start, end):
    store.create_lease(pool="local", node_name=node, lease_id=lid, job_ids=[job], account="chem", at=start)
    for st in ("LAUNCHING", "BOOTING", "READY"):
        store.transition(lid, st, at=start + 10, **({"instance_id": f"i-{lid}"} if st == "BOOTING" else {}))
    store.record_allocations(lid, [Allocation(job, start + 60, None, "chem", "alice")])
    store.close_allocations(lid, end)


def _requeued_itself(store):
    """Job 42 on cloud1 gets a spot notice, checkpoints and requeues itself (it has left the node when the lease
    fails: burstd requeues nothing), then finishes on cloud2."""
    _lease(store, A, "cloud1", 42, T, T + 650)
    store.add_spend([SpendInterval(A, "local", "chem", T + 60, T + 660, 3_600_000, 600_000, 42, "alice")])
    store.transition(A, "DRAINING", "spot-interruption deadline 1773144720", at=T + 600)
    store.transition(A, "FAILED", "preempted: notice deadline 1773144720 passed", at=T + 720)
    store.transition(A, "TERMINATING", "preempted", at=T + 721)
    store.transition(A, "TERMINATED", "gone", at=T + 760, ended_at=T + 760)
    _lease(store, B, "cloud2", 42, T + 800, T + 1860)
    store.add_spend([SpendInterval(B, "local", "chem", T + 860, T + 1860, 3_600_000, 1_000_000, 42, "alice")])
    store.transition(B, "TERMINATING", "idle", at=T + 2000)
    store.transition(B, "TERMINATED", "gone", at=T + 2060, ended_at=T + 2060)
    store.book_data_spend(DataSpend("t1", "transfer_in", "local", "chem", 10**9, T + 30, 90_000, 42, "alice"))
    store.book_data_spend(DataSpend("t2", "transfer_out", "local", "chem", 10**9, T + 1900, 45_000, 42, "alice"))


RUNS_42 = [SacctJob(42, "chem", "alice", ("cloud1",), "REQUEUED", T + 55, T + 650),
           SacctJob(42, "chem", "alice", ("cloud2",), "COMPLETED", T + 855, T + 1860)]


def test_jobs_joins_sacct_a_self_requeued_job_shows_its_requeue_preemption_outcome_and_runs(live):
    path, _, store, adapter, *_ = live
    _requeued_itself(store)
    adapter.sacct = RUNS_42
    [j] = json.loads(cli("jobs", "--json", "-c", path).stdout)
    assert (j["requeues"], j["requeues_by_burstd"], j["preemptions"], j["outcome"]) == (1, 0, 1, "COMPLETED")
    assert [(r["nodes"], r["side"], r["state"]) for r in j["slurm"]["runs"]] == [
        (["cloud1"], "cloud", "REQUEUED"), (["cloud2"], "cloud", "COMPLETED")]
    assert j["cost_by_kind_micro_usd"] == {"compute": 1_600_000, "transfer_in": 90_000, "transfer_out": 45_000,
                                           "storage": 0}
    assert j["cost_micro_usd"] == 1_735_000
    asked = [c for c in adapter.calls if c[0] == "sacct_jobs"]
    assert asked and asked[-1][3] == ("42",)  # sacct --jobs=42, every run of it (-D)
    r = cli("jobs", "-c", path)
    assert r.exit_code == 0 and "COMPLETED" in r.output, r.output
    cli("jobs", "--json", "-c", path)  # a finished job's runs never change: sacct is not asked again
    assert len([c for c in adapter.calls if c[0] == "sacct_jobs"]) == len(asked)


def test_explain_of_the_finished_job_gives_slurms_outcome_every_run_and_cost_by_kind(live):
    path, rec, store, adapter, *_ = live
    rec.cycle()
    _requeued_itself(store)
    adapter.sacct = RUNS_42
    data = json.loads(cli("explain", "42", "--json", "-c", path).stdout)
    assert data["found"] is False and data["outcome"] == "COMPLETED"
    assert data["history"]["slurm"]["run_count"] == 2 and data["history"]["requeues"] == 1
    assert cli("explain", "42", "-c", path).output.strip() == (
        "job 42 (chem/alice): ran on cloud1 (local, spot), then cloud2 (local, spot), preempted once, requeued once, "
        "cost $1.74 (spot $1.60, transfer in $0.09, transfer out $0.05); Slurm: COMPLETED after 2 runs: REQUEUED on "
        "cloud1 (cloud), then COMPLETED on cloud2 (cloud)")


def test_without_slurmdbd_jobs_says_so_and_counts_requeues_slurm_or_the_watch_saw(live):
    path, rec, store, adapter, *_ = live
    _requeued_itself(store)
    adapter.sacct = None  # a Slurm without slurmdbd
    [j] = json.loads(cli("jobs", "--json", "-c", path).stdout)
    assert j["outcome"] is None and "no slurmdbd" in j["slurm"]["note"] and j["requeues"] == 0
    rec.requeue_watch.requeued[42] = 1  # the daemon saw it requeue itself while Slurm still listed it
    [j] = json.loads(cli("jobs", "--json", "-c", path).stdout)
    assert (j["requeues"], j["preemptions"]) == (1, 1)
    rec.requeue_watch.requeued.clear()  # a restarted daemon: Slurm's restart_count of a job it still lists
    adapter.jobs = [Job(42, "train", "alice", "chem", ("cloud",), "PENDING", restart_count=2)]
    rec.cycle()
    [j] = json.loads(cli("jobs", "--json", "-c", path).stdout)
    assert j["requeues"] == 2


def test_when_sacct_fails_the_stories_still_come_and_say_why(live):
    path, _, store, adapter, *_ = live
    _requeued_itself(store)
    adapter.sacct, adapter.sacct_error = RUNS_42, SlurmError("sacct: error: slurmdbd: Connection refused")
    r = cli("jobs", "--json", "-c", path)
    assert r.exit_code == 0, r.output
    [j] = json.loads(r.stdout)
    assert j["outcome"] is None and "sacct did not answer" in j["slurm"]["note"] and "refused" in j["sentence"]


def test_explain_an_array_task_that_left_the_queue_by_the_id_slurm_gives_it(live):
    """Task 5_0 ran as job 7 (as on the 22.05 bed): burstd keeps job 7, sacct --jobs=5_0 says which it is."""
    path, rec, store, adapter, *_ = live
    rec.cycle()
    _lease(store, A, "cloud1", 7, T, T + 300)
    adapter.sacct = [SacctJob(7, "chem", "alice", ("cloud1",), "TIMEOUT", T + 55, T + 300, array_job_id=5,
                              array_task_id=0),
                     SacctJob(5, "chem", "alice", ("onprem1",), "COMPLETED", T + 55, T + 90, array_job_id=5,
                              array_task_id=1)]
    data = json.loads(cli("explain", "5_0", "--json", "-c", path).stdout)
    assert data["outcome"] == "TIMEOUT" and data["history"]["job_id"] == 7 and data["history"]["slurm_id"] == "5_0"
    assert cli("explain", "5_0", "-c", path).output.startswith("job 5_0 (chem/alice): ran on cloud1")
    # task 5_1 never burst: Slurm's record alone
    out = cli("explain", "5_1", "-c", path).output
    assert "job 5_1: never on burstd's cloud nodes; Slurm: COMPLETED on onprem1 (on-prem)" in out
    adapter.sacct = None
    assert "cannot tell which job this array task" in cli("explain", "5_0", "-c", path).output


def test_a_job_slurm_still_runs_is_not_kept_as_settled(live):
    path, _, store, adapter, *_ = live
    _requeued_itself(store)
    adapter.sacct = [RUNS_42[0], dataclasses.replace(RUNS_42[1], state="RUNNING", end=None)]
    cli("jobs", "--json", "-c", path)
    adapter.sacct = RUNS_42
    [j] = json.loads(cli("jobs", "--json", "-c", path).stdout)
    assert j["outcome"] == "COMPLETED"
