"""explain_job(): the sentence burstctl explain prints, from the last decisions or a fresh decide()."""

from __future__ import annotations

import pytest
from policy_factories import NOW, book, busy_cluster, config, lease, pending, running

from burstd.domain.slurm import Snapshot
from burstd.policy import decide
from burstd.policy.explain import explain_job


def test_pending_job_sentence_has_wait_estimate_budget_pool_and_verdict():
    snap = busy_cluster(pending(7, waited_s=14 * 60))
    r = explain_job(7, snap, budgets=book({"chem": 412.0}), config=config())
    assert r.burst and r.pool == "aws-cpu"
    assert r.sentence == ("job 7 (chem/alice): waited 14 min, expected on-prem start in 10 h, account chem has "
                          "$412.00 left this month, expected bill $1.08, the wait it saves is worth $267.75, "
                          "pool aws-cpu at $1.00/node-h: burst")
    assert r.as_dict()["sentence"] == r.sentence


def test_explains_why_not_from_the_last_cycles_decisions():
    snap = busy_cluster(pending(7, account="bio"))
    d = decide(snap, [], book(), None, config())
    r = explain_job(7, snap, decisions=d)
    assert not r.burst and r.sentence.endswith("stays on-prem: account bio has no budget: "
                                               "burstctl budget set bio USD, or budget.default_account_usd in the config")


def test_running_and_missing_jobs():
    cloud = running(9, partition="cloud")
    snap = Snapshot(NOW, busy_cluster().jobs + (cloud,), ())
    r = explain_job(9, snap, decisions=decide(snap, [], book(), None, config()),
                    leases=[lease(1, job_ids=(9,))], config=config())
    assert r.state == "RUNNING" and "running in cloud pool aws-cpu" in r.sentence and "lease L1" in r.sentence
    assert "running on-prem" in explain_job(10_000, snap, decisions=decide(snap, [], book(), None, config())).sentence
    assert not explain_job(12345, snap, decisions=None).found


def test_fresh_explain_needs_inputs():
    with pytest.raises(ValueError, match="needs either decisions or budgets"):
        explain_job(7, busy_cluster(pending(7)))


def test_array_tasks_and_het_components_are_found_as_slurm_writes_them():
    from burstd.domain.jobref import parse_job_ref

    task = pending(1240, array_job_id=1234, array_task_id=5)
    het = pending(1301, het_job_id=1300, het_job_offset=1)
    snap = busy_cluster(pending(12345, account="bio"), task, het)
    d = decide(snap, [], book(), None, config())
    r = explain_job(parse_job_ref("1234_5"), snap, decisions=d)
    assert r.found and r.job_id == 1240 and r.sentence.startswith("job 1234_5 (chem/alice)")
    assert explain_job(parse_job_ref("1300+1"), snap, decisions=d).job_id == 1301
    missing = explain_job(parse_job_ref("1234_6"), snap, decisions=d)
    assert not missing.found and missing.sentence.startswith("job 1234_6: not in the queue")
