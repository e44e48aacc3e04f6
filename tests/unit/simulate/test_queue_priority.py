"""Queue priority classes of the on-prem model (``burstd.simulate.queue_priority``; issue 25, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.simulate.calibrate import calibrate_trace
from burstd.simulate.policies import make_setup, policy_simulator
from burstd.simulate.queue_priority import NO_PRIORITY, QueuePriority, queue_priority
from burstd.simulate.report import simulate_trace
from burstd.simulate.traces import TraceInfo, TraceJob, read_swf

DATA = Path(__file__).resolve().parents[2] / "data" / "simulate"
H = 3600.0
# SDSC Blue Horizon's header names its queues (trimmed): priority words, and one that is none of them
SDSC_QUEUES = ((0, "interactive"), (1, "express"), (2, "high"), (3, "normal"), (4, "low"), (6, "Diag"))


def job(jid: int, submit: float, cpus: int, run: float, queue: int) -> TraceJob:
    return TraceJob(jid, submit, run, run, cpus, queue=f"q{queue}")


def starts(jobs: list[TraceJob], cpus: int, classes: QueuePriority = NO_PRIORITY) -> dict[int, float | None]:
    """Each job's first on-prem start in a no-burst replay on a ``cpus``-CPU site of one-CPU nodes."""
    setup = make_setup(TraceInfo("swf", max_procs=cpus, max_nodes=cpus), False, None, None, None, None,
                       queue_priority=classes)
    sim = policy_simulator("never", setup, jobs)
    sim.run()
    return {j.tj.job_id: j.first_start for j in sim.done}


def test_a_higher_class_job_starts_before_an_earlier_lower_class_one():
    # 4 CPUs, all taken for 1 h; a normal-class job (q3) queues at 10 s, an interactive one (q0) at 20 s
    jobs = [job(1, 0.0, 4, H, 3), job(2, 10.0, 4, H, 3), job(3, 20.0, 4, H, 0)]
    assert starts(jobs, 4) == {1: 0.0, 2: H, 3: 2 * H}  # submit order
    classes = queue_priority("0,3", TraceInfo("swf"))
    assert starts(jobs, 4, classes) == {1: 0.0, 2: 2 * H, 3: H}
    # the header's names give the same order
    assert starts(jobs, 4, queue_priority("auto", TraceInfo("swf", queues=SDSC_QUEUES))) == {1: 0.0, 2: 2 * H, 3: H}


def test_backfill_keeps_one_reservation_for_the_head_of_the_ordered_queue():
    # 4 CPUs: job 1 (2 CPUs, 1 h) and job 2 (1 CPU, 10 h) run, 1 CPU free. At 10 s three jobs queue: job 3
    # (normal, 1 CPU, 5 h), job 4 (interactive, 3 CPUs, 1 h) and job 5 (normal, 1 CPU, 30 min)
    jobs = [job(1, 0.0, 2, H, 3), job(2, 0.0, 1, 10 * H, 3), job(3, 10.0, 1, 5 * H, 3), job(4, 10.0, 3, H, 0),
            job(5, 10.0, 1, H / 2, 3)]
    # submit order: job 3 takes the free CPU, job 4 heads the queue until job 3 ends; job 5 backfills at 1 h
    assert starts(jobs, 4) == {1: 0.0, 2: 0.0, 3: 10.0, 4: 5 * H + 10.0, 5: H}
    # by class: job 4 heads the queue and reserves the CPUs free at 1 h; job 3 (5 h) may not take the free
    # CPU before then, job 5 (done by 1 h) may, and job 4 starts on time
    got = starts(jobs, 4, queue_priority("0", TraceInfo("swf")))
    assert got == {1: 0.0, 2: 0.0, 3: 2 * H, 4: H, 5: 10.0}


@pytest.mark.parametrize("spec", [None, "", "7", "7,8"])
def test_no_ordering_and_one_nobody_is_in_replay_exactly_as_before(spec):
    # every policy on the pinned mini trace (test_replay_pinned.py), whose jobs name no queue: off, and on with
    # classes no job is in (every job ranks alike, every key is computed), give the figures to the bit
    before = simulate_trace(DATA / "mini.swf")
    after = simulate_trace(DATA / "mini.swf", queue_priority=spec)
    assert after["queue_priority"] == (None if not spec else queue_priority(spec, TraceInfo("swf")).describe())
    clock = ("wall_s", "cpu_s")  # how long the replay took, not what it replayed
    for name, row in before["policies"].items():
        assert {k: v for k, v in after["policies"][name].items() if k not in clock} == \
            {k: v for k, v in row.items() if k not in clock}, name


def test_the_ordering_is_parsed_from_numbers_or_the_header():
    given = queue_priority(" 2, 0 ,1", TraceInfo("swf"))
    assert given.ranks == (("q2", 0), ("q0", 1), ("q1", 2)) and given.unlisted == 3 and given.active
    assert given.describe() == "q2 > q0 > q1 > others"
    key = given.order_key()
    assert key(job(9, 5.0, 1, 1.0, 1)) < key(job(8, 1.0, 1, 1.0, 4))  # q1 before an unlisted queue
    auto = queue_priority("AUTO", TraceInfo("swf", queues=SDSC_QUEUES))
    # priority words rank in their order; "Diag" (no priority word) and any queue the header omits: as normal
    assert dict(auto.ranks) == {"q0": 0, "q1": 1, "q2": 2, "q3": 3, "q4": 4} and auto.unlisted == 3
    assert auto.describe() == "q0 > q1 > q2 > q3, others > q4"
    assert auto.order_key()(job(1, 9.0, 1, 1.0, 6)) < auto.order_key()(job(2, 1.0, 1, 1.0, 4))  # Diag before low
    assert queue_priority(None, TraceInfo("swf")) is NO_PRIORITY and not NO_PRIORITY.active
    assert NO_PRIORITY.order_key()(job(3, 7.0, 1, 1.0, 0)) == (7.0, 3)  # submit order, as before


@pytest.mark.parametrize(("spec", "queues", "message"), [
    ("0,x", (), r"--queue-priority '0,x': 'x' is not a queue number"),
    ("1,-2", (), r"'-2' is not a queue number"),
    ("1,2,1", (), r"queue 1 is named twice"),
    ("auto", (), r"--queue-priority auto: t.swf has no '; Queue: N name' header lines"),
    ("auto", ((1, "DSI"), (2, "astro")), r"t.swf's header queues \(DSI, astro\) name no priority class"),
])
def test_a_bad_ordering_is_refused_by_name(spec, queues, message):
    with pytest.raises(ValueError, match=message):
        queue_priority(spec, TraceInfo("swf", queues=queues), "t.swf")


@pytest.mark.parametrize("fmt", ["philly", "sacct"])
def test_a_trace_that_records_no_queue_is_refused(fmt):
    with pytest.raises(ValueError, match=f"t.csv is a {fmt} trace, which records no queue a job"):
        queue_priority("0,1", TraceInfo(fmt), "t.csv")
    assert queue_priority(None, TraceInfo(fmt)) is NO_PRIORITY


def _swf(tmp_path: Path) -> Path:
    # 4 CPUs: a normal job (queue 3) holds them 1 h; at 10 s a normal 4-CPU job queues, at 20 s an interactive
    # one (queue 0). The site started the interactive job first (recorded waits: 1 h, 2 h - 10 s, 1 h - 20 s)
    head = "; MaxProcs: 4\n; MaxNodes: 4\n; MaxQueues: 2\n; Queue:  0  interactive\n; Queue:  3  normal\n"
    rows = [(1, 0, 0, 3), (2, 10, 2 * 3600 - 10, 3), (3, 20, 3600 - 20, 0)]
    p = tmp_path / "classes.swf"
    p.write_text(head + "".join(f"{i} {s} {w} 3600 4 -1 -1 4 3600 -1 1 1 1 -1 {q} -1 -1 -1\n"
                                for i, s, w, q in rows))
    return p


def test_the_swf_header_queues_are_read(tmp_path):
    _, info = read_swf(_swf(tmp_path))
    assert info.queues == ((0, "interactive"), (3, "normal"))


def test_calibrate_and_the_cli_take_the_ordering(tmp_path):
    trace = _swf(tmp_path)
    off = calibrate_trace(trace)
    assert off["queue_priority"] is None and off["share_within_2x"] == pytest.approx(1 / 3, abs=1e-4)
    on = calibrate_trace(trace, queue_priority="auto")
    assert on["queue_priority"] == "q0 > q3, others" and on["share_within_2x"] == 1.0 and on["mean_ratio"] == 1.0
    cli = CliRunner()
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--json", "--queue-priority", "0,3"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["share_within_2x"] == 1.0
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--policy", "never", "--json", "--market",
                         "on-demand", "--queue-priority", "auto"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["queue_priority"] == "q0 > q3, others"
    assert any(a.startswith("queue priority on-prem: classes q0 > q3, others (the trace header's queue names)")
               for a in rep["assumptions"])
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--queue-priority", "high"])
    assert r.exit_code != 0 and "'high' is not a queue number" in r.output
