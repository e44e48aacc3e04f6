"""What a preemption storm did to each job, read from the jobs' logs (issue 22 "Measure"): pure, no I/O.

A template job's log (``--open-mode=append``) holds every run: a ``job N run K on HOST`` line starts a run, and
rank 0 prints ``rank=0 step=S t=EPOCH ...`` for each step. From that and the times burstd was told to reclaim a
node, :func:`job_summary` gives the per-job figures of ``burstctl demo --storm`` and :func:`storm_ok` the issue's
done rule.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

RUN_START = re.compile(r"job \d+ run \d+ on ", re.ASCII)
STEP = re.compile(r"rank=0 step=(\d+) t=(\d+(?:\.\d+)?) ", re.ASCII)
BACK_TO_TRAINING_MAX_S = 45.0  # with notice, on the bed (issue 22)


@dataclass(frozen=True)
class Step:
    number: int
    at: float  # epoch seconds, as rank 0 printed it


@dataclass
class Preemption:
    """One reclaim of a node the job ran on: ``at`` is when it was asked for (epoch seconds)."""

    with_notice: bool
    at: float


@dataclass
class JobRecord:
    name: str
    job_id: int
    nodes: int
    ranks: int
    checkpoint_interval_steps: int
    preemptions: list[Preemption] = field(default_factory=list)


def runs_of(log_text: str) -> list[list[Step]]:
    """Rank 0's steps, one list per run of the job, in log order (a run that printed no step is an empty list)."""
    runs: list[list[Step]] = []
    for line in log_text.splitlines():
        if RUN_START.search(line):
            runs.append([])
        m = STEP.search(line)
        if m and runs:
            runs[-1].append(Step(int(m.group(1)), float(m.group(2))))
    return runs


def steps_redone(runs: list[list[Step]]) -> list[int]:
    """Per interruption: the last step a run printed minus the step the next run resumed after."""
    trained = [r for r in runs if r]
    return [max(s.number for s in prev) - (min(s.number for s in nxt) - 1) for prev, nxt in itertools.pairwise(trained)]


def job_summary(job: JobRecord, log_text: str, bit_identical: bool) -> dict:
    """The issue's per-job figures. Each preemption is matched with the interruption that follows it in the log
    (the n-th preemption ended the n-th run that trained); ``back_to_training_s`` runs from the reclaim (or its
    notice) to the first step of the next run."""
    trained = [r for r in runs_of(log_text) if r]
    redone = steps_redone(trained)
    with_notice: list[int] = []
    without: list[int] = []
    back: list[float | None] = []
    for i, p in enumerate(job.preemptions):
        (with_notice if p.with_notice else without).extend(redone[i:i + 1])
        back.append(round(trained[i + 1][0].at - p.at, 1) if i + 1 < len(trained) else None)
    return {
        "job_id": job.job_id,
        "nodes": job.nodes,
        "ranks": job.ranks,
        "preemptions_with_notice": sum(p.with_notice for p in job.preemptions),
        "preemptions_without_notice": sum(not p.with_notice for p in job.preemptions),
        "steps_redone_with_notice": max(with_notice, default=0),
        "steps_redone_without_notice": max(without, default=0),
        "checkpoint_interval_steps": job.checkpoint_interval_steps,
        "back_to_training_s": back,
        "back_to_training_with_notice_s": [b for b, p in zip(back, job.preemptions) if p.with_notice],
        "interruptions_seen": len(redone),
        "bit_identical": bit_identical,
    }


def storm_failures(summary: dict, back_to_training_max_s: float = BACK_TO_TRAINING_MAX_S) -> list[str]:
    """Why the storm misses issue 22's done rule (empty: it holds): every job completes bit-identical, 0 leaked,
    0 steps redone with notice, at most 1 without notice for a job on two or more nodes, and back to training
    within 45 s (``back_to_training_max_s``) of every notice."""
    why: list[str] = []
    if summary.get("error"):  # a phase of the storm never came
        why.append(f"the storm did not finish: {summary['error']}")
    jobs = summary.get("jobs", {})
    if not jobs or summary.get("jobs_completed") != summary.get("jobs_submitted") or \
            summary.get("jobs_submitted") != len(jobs):
        why.append(f"{summary.get('jobs_completed')} of {summary.get('jobs_submitted')} jobs completed")
    if summary.get("leaked_vms"):
        why.append(f"{summary['leaked_vms']} VMs leaked")
    for name, j in jobs.items():
        if not j.get("bit_identical"):
            why.append(f"{name}: final weights differ from an uninterrupted run")
        preempted = j.get("preemptions_with_notice", 0) + j.get("preemptions_without_notice", 0)
        if j.get("interruptions_seen") != preempted:
            why.append(f"{name}: {preempted} preemptions but {j.get('interruptions_seen')} interruptions in its log")
        if j.get("steps_redone_with_notice", 0) > 0:
            why.append(f"{name}: {j['steps_redone_with_notice']} steps redone with notice")
        if j.get("nodes", 1) >= 2 and j.get("steps_redone_without_notice", 0) > 1:
            why.append(f"{name}: {j['steps_redone_without_notice']} steps redone without notice on "
                       f"{j['nodes']} nodes")
        slow = [b for b in j.get("back_to_training_with_notice_s", []) if b is None or b > back_to_training_max_s]
        if slow:
            why.append(f"{name}: back to training {slow} s after a notice (at most {back_to_training_max_s:g})")
    return why
