"""The storm's per-job figures and issue 22's done rule (burstd/testbed/storm_summary.py), from logs shaped as the
templates and burstd.train.example write them. The live run: `burstctl demo --storm` and
tests/integration/test_preemption_storm.py."""

from __future__ import annotations

from burstd.testbed.storm_summary import (
    JobRecord,
    Preemption,
    job_summary,
    runs_of,
    steps_redone,
    storm_failures,
)


def _log(*runs: tuple[int, int, float]) -> str:
    """Runs as (first step, last step, epoch of the first step), 0.3 s a step, with the noise a real log has."""
    lines = []
    for k, (first, last, t0) in enumerate(runs, 1):
        lines.append(f"2026-11-26T23:00:00+00:00 job 7 run {k} on cloud{k}, checkpoints in /tmp/c")
        lines.append("rank=1 step=999 t=1.0 loss=0.1")  # another rank: not counted
        for i, step in enumerate(range(first, last + 1)):
            lines.append(f"rank=0 step={step} t={t0 + 0.3 * i:.6f} loss=0.5")
        lines.append("[W socket.cpp] connection reset")
    return "\n".join(lines) + "\n"


def test_runs_and_steps_redone_come_from_rank_0s_lines_per_run():
    text = _log((1, 25, 1000.0), (26, 37, 1040.0), (31, 100, 1100.0))
    runs = runs_of(text)
    assert [(r[0].number, r[-1].number) for r in runs] == [(1, 25), (26, 37), (31, 100)]
    assert runs[1][0].at == 1040.0
    assert steps_redone(runs) == [0, 7]
    assert runs_of("rank=0 step=3 t=1.0 loss=1\n") == []  # a step before any run line belongs to no run


def test_a_job_preempted_with_notice_then_without_gets_the_issues_figures():
    job = JobRecord("m", 42, nodes=2, ranks=4, checkpoint_interval_steps=10,
                    preemptions=[Preemption(True, 1010.0), Preemption(False, 1070.5)])
    s = job_summary(job, _log((1, 25, 1000.0), (26, 40, 1040.0), (40, 100, 1100.0)), bit_identical=True)
    assert (s["nodes"], s["ranks"], s["checkpoint_interval_steps"]) == (2, 4, 10)
    assert (s["preemptions_with_notice"], s["preemptions_without_notice"]) == (1, 1)
    assert (s["steps_redone_with_notice"], s["steps_redone_without_notice"]) == (0, 1)
    assert s["back_to_training_s"] == [30.0, 29.5] and s["back_to_training_with_notice_s"] == [30.0]
    assert s["interruptions_seen"] == 2 and s["bit_identical"]
    assert storm_failures(_overall(m=s)) == []


def test_a_preemption_with_no_run_after_it_has_no_time_back_to_training():
    job = JobRecord("s1", 1, 1, 2, 10, [Preemption(True, 1010.0)])
    s = job_summary(job, _log((1, 25, 1000.0)), bit_identical=False)
    assert s["back_to_training_s"] == [None] and s["interruptions_seen"] == 0
    why = storm_failures(_overall(s1=s))
    assert any("1 preemptions but 0 interruptions" in w for w in why)
    assert any("back to training [None]" in w for w in why)
    assert any("final weights differ" in w for w in why)


def _overall(**jobs) -> dict:
    return {"jobs_submitted": len(jobs), "jobs_completed": len(jobs), "leaked_vms": 0, "jobs": jobs}


def _job(**over) -> dict:
    j = {"nodes": 1, "ranks": 2, "preemptions_with_notice": 1, "preemptions_without_notice": 1,
         "steps_redone_with_notice": 0, "steps_redone_without_notice": 8, "back_to_training_with_notice_s": [20.0],
         "interruptions_seen": 2, "bit_identical": True}
    return j | over


def test_the_done_rule_names_each_way_a_storm_falls_short():
    assert storm_failures(_overall(s1=_job(), s2=_job(preemptions_with_notice=0, preemptions_without_notice=0,
                                                     interruptions_seen=0, back_to_training_with_notice_s=[]))) == []
    # one node may lose up to its checkpoint interval without notice; two nodes at most one step
    assert storm_failures(_overall(m=_job(nodes=2, steps_redone_without_notice=1))) == []
    assert storm_failures(_overall(m=_job(nodes=2, steps_redone_without_notice=2))) == [
        "m: 2 steps redone without notice on 2 nodes"]
    assert storm_failures(_overall(s1=_job(steps_redone_with_notice=1))) == ["s1: 1 steps redone with notice"]
    assert storm_failures(_overall(s1=_job(back_to_training_with_notice_s=[45.0, 45.1]))) == [
        "s1: back to training [45.1] s after a notice (at most 45)"]
    assert storm_failures(_overall(s1=_job(back_to_training_with_notice_s=[90.0])), back_to_training_max_s=120) == []
    assert storm_failures(_overall(s1=_job()) | {"leaked_vms": 2}) == ["2 VMs leaked"]
    assert storm_failures(_overall(s1=_job()) | {"jobs_completed": 0}) == ["0 of 1 jobs completed"]
    assert storm_failures({"finished": False, "error": "timed out waiting for m", "leaked_vms": 0})[0] == \
        "the storm did not finish: timed out waiting for m"
