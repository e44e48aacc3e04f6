"""burstd's spend against slurmdbd's allocations: agreement, and every kind of difference named."""

from __future__ import annotations

from burstd.report.sacct_reconcile import SacctJob, reconcile

CLOUD = ["cloud1", "cloud2", "cloud3"]


def job(jid, nodes, account="physics"):
    return SacctJob(job_id=jid, account=account, user="u", nodes=tuple(nodes), state="COMPLETED", start=1, end=2)


def test_the_same_jobs_on_the_same_nodes_agree_and_overhead_stays_apart():
    r = reconcile({"7": 300, "8": 200, "(overhead)": 50}, {7: ["cloud1"], 8: ["cloud2", "cloud3"]},
                  {7: "physics", 8: "physics"}, [job(7, ["cloud1"]), job(8, ["cloud2", "cloud3"]),
                                                 job(9, ["onprem1"])], CLOUD)
    assert r.ok and r.agree == [7, 8]
    assert (r.agreed_micros, r.unmatched_micros, r.overhead_micros) == (500, 0, 50)


def test_every_difference_is_reported_not_hidden():
    r = reconcile({"7": 300, "8": 200, "10": 40}, {7: ["cloud1"], 8: ["cloud2"], 10: ["cloud1"]},
                  {7: "physics", 8: "physics", 10: "chemistry"},
                  [job(7, ["onprem1"]),            # burstd charged it, slurmdbd says it ran on-prem
                   job(8, ["cloud3"]),             # on another cloud node than burstd's lease
                   job(10, ["cloud1"], "physics"),  # charged to another account than slurmdbd's
                   job(11, ["cloud2"])],           # ran on a cloud node, burstd charged nothing
                  CLOUD)
    assert not r.ok
    assert r.only_burstd == {7: 300} and r.unmatched_micros == 300
    assert r.other_nodes == {8: (["cloud2"], ["cloud3"])}
    assert r.other_account == {10: ("chemistry", "physics")}
    assert r.only_sacct == [11]
    d = r.to_dict()
    assert d["ok"] is False and d["only_sacct"] == [11] and d["other_account"]["10"] == {"burstd": "chemistry",
                                                                                        "sacct": "physics"}


def test_instances_join_on_the_instance_id_and_name_every_difference():
    from burstd.report.sacct_reconcile import SlurmInstance, match_instances

    launched = {"i-1": "cloud1", "i-2": "cloud2", "i-3": "cloud3"}
    recorded = [SlurmInstance("cloud1", "i-1", "ns", 1, 2), SlurmInstance("cloud3", "i-2", "ns", 1, 2),
                SlurmInstance("cloud2", "i-9", "ns", 1, None)]
    assert match_instances(launched, recorded) == {
        "agree": ["i-1"],
        "only_burstd": ["i-3"],  # came up, but Slurm never recorded it
        "other_node": {"i-2": {"burstd": "cloud2", "slurm": "cloud3"}},
        "only_slurm": ["i-9"],
    }
    assert match_instances(launched, None) is None  # before 23.11 or without slurmdbd: nothing to compare


def test_a_requeued_job_is_judged_on_every_run_not_the_last_one():
    """Issue 26: a preempted cloud job requeued and waiting again (or run on-prem since) has several records
    under one id (``sacct --duplicates``); its cloud run agrees with burstd's charge, not a false alarm."""
    def run(jid, nodes, state, account="physics"):
        return SacctJob(job_id=jid, account=account, user="u", nodes=tuple(nodes), state=state, start=1, end=2)

    recorded = [run(7, ["cloud1"], "REQUEUED"), run(7, [], "PENDING"),            # preempted, waiting again
                run(8, ["cloud2"], "REQUEUED"), run(8, ["onprem1"], "COMPLETED"),  # then ran on-prem
                run(9, ["cloud3"], "REQUEUED"), run(9, ["cloud1"], "RUNNING")]     # two cloud runs
    r = reconcile({"7": 100, "8": 200, "9": 300}, {7: ["cloud1"], 8: ["cloud2"], 9: ["cloud3", "cloud1"]},
                  {7: "physics", 8: "physics", 9: "physics"}, recorded, CLOUD)
    assert r.ok and r.agree == [7, 8, 9] and r.agreed_micros == 600, r.to_dict()

    # a run burstd never charged is still reported, and an account is checked against the cloud runs only
    r = reconcile({"8": 200}, {8: ["cloud2"]}, {8: "chemistry"},
                  recorded[2:4] + [run(10, ["onprem1"], "COMPLETED"), run(10, ["cloud2"], "REQUEUED")], CLOUD)
    assert r.only_sacct == [10] and r.other_account == {8: ("chemistry", "physics")}
