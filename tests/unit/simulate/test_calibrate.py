"""``burstctl simulate --calibrate``: the never-burst replay against the waits the trace recorded."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.simulate.calibrate import STALL_MIN_S, WAIT_FLOOR_S, WaitPair, calibrate_trace, compare, recorded_stalls
from burstd.simulate.traces import TraceJob


def _swf(rows: list[tuple[int, float, float, float, int, float]], procs: int) -> str:
    """(id, submit, recorded wait, run, procs, requested time) rows as an SWF file."""
    head = f"; MaxProcs: {procs}\n; MaxNodes: {procs}\n"
    return head + "".join(f"{i} {s} {w} {r} {p} -1 -1 {p} {req} -1 1 1 1 -1 1 -1 -1 -1\n"
                          for i, s, w, r, p, req in rows)


def test_figures_of_a_perfect_and_of_a_twice_too_slow_model():
    same = [WaitPair(600.0, 600.0), WaitPair(0.0, 0.0), WaitPair(7200.0, 7200.0)]
    rep = compare(same)
    assert rep["median_abs_rel_error"] == 0 and rep["share_within_2x"] == 1 and rep["mean_ratio"] == 1
    slow = [WaitPair(1000.0, 3000.0), WaitPair(1000.0, 1500.0), WaitPair(10.0, 30.0)]
    rep = compare(slow)
    assert rep["recorded_mean_wait_s"] == pytest.approx(670.0)
    assert rep["model_mean_wait_s"] == pytest.approx(1510.0)
    # 3000/1000 is outside 2x; 1500/1000 inside; 10 s and 30 s are both under the 60 s floor: the same answer
    assert rep["share_within_2x"] == pytest.approx(2 / 3, abs=1e-4)
    assert rep["median_abs_rel_error"] == pytest.approx(0.5)


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), min_size=1, max_size=50))
def test_figures_stay_in_range_and_a_model_equal_to_the_record_is_perfect(waits):
    rep = compare([WaitPair(r, m) for r, m in waits])
    assert 0 <= rep["share_within_2x"] <= 1 and rep["median_abs_rel_error"] >= 0
    exact = compare([WaitPair(r, r) for r, _ in waits])
    assert exact["share_within_2x"] == 1 and exact["median_abs_rel_error"] == 0


def test_a_trace_the_model_replays_exactly_calibrates_perfectly(tmp_path):
    # a 4-CPU site, every job wants all 4: strict first come first served, so each job's recorded wait is
    # the model's too (job k waits for the k-1 before it, 1 h each)
    rows = [(k, 0.0, 3600.0 * (k - 1), 3600.0, 4, 3600.0) for k in range(1, 6)]
    trace = tmp_path / "fcfs.swf"
    trace.write_text(_swf(rows, 4))
    rep = calibrate_trace(trace)
    assert rep["jobs_compared"] == 5 and rep["share_within_2x"] == 1 and rep["median_abs_rel_error"] == 0
    assert rep["recorded_mean_wait_s"] == rep["model_mean_wait_s"] == 7200.0


def test_a_site_that_waited_longer_than_the_model_shows_the_gap(tmp_path):
    # the site kept every job waiting 2 h more than its capacity explains (downtime, say)
    rows = [(k, 0.0, 3600.0 * (k - 1) + 7200.0, 3600.0, 4, 3600.0) for k in range(1, 6)]
    trace = tmp_path / "slow.swf"
    trace.write_text(_swf(rows, 4))
    rep = calibrate_trace(trace)
    assert rep["model_mean_wait_s"] < rep["recorded_mean_wait_s"]
    assert rep["mean_ratio"] == pytest.approx(7200.0 / 14400.0)
    assert rep["share_within_2x"] < 1


def _ran(job_id: int, submit: float, wait: float, run: float, cpus: int) -> TraceJob:
    return TraceJob(job_id, submit, run, run, cpus, recorded_wait=wait)


H = 3600.0


@pytest.mark.parametrize("case, stalls, across", [
    # a 10-CPU site idle for 10 h while job 2 waited: a stall, job 2 (of 3) waited across it
    ([_ran(1, 0, 0, 100, 2), _ran(2, 10, 10 * H, 60, 2), _ran(3, 10 * H + 5, 0, 60, 2)], 1, 1 / 3),
    # the same 10 h, but a job held 6 of the 10 CPUs all along: the site was busy, not lost
    ([_ran(1, 0, 0, 11 * H, 6), _ran(2, 10, 10 * H, 60, 2), _ran(3, 10 * H + 5, 0, 60, 2)], 0, 0.0),
    # 10 h with nobody waiting: an idle site
    ([_ran(1, 0, 0, 100, 2), _ran(2, 10 * H, 0, 60, 2), _ran(3, 10 * H + 5, 0, 60, 2)], 0, 0.0),
    # a wait of 5 h: shorter than a stall
    ([_ran(1, 0, 0, 100, 2), _ran(2, 10, 5 * H, 60, 2), _ran(3, 5 * H + 20, 0, 60, 2)], 0, 0.0),
    # two stalls; job 2 waited across both and counts once, job 4 across the second
    ([_ran(1, 0, 0, 100, 2), _ran(2, 10, 30 * H, 60, 2), _ran(5, 7 * H, 0, 60, 1), _ran(4, 8 * H, 22 * H, 60, 1),
      _ran(3, 30 * H + 5, 0, 60, 2)], 2, 2 / 5),
])
def test_the_records_stalls_are_long_idle_stretches_with_jobs_waiting(case, stalls, across):
    out = recorded_stalls(case, capacity=10)
    assert out["count"] == stalls and out["share_of_jobs_waiting_across"] == pytest.approx(across, abs=1e-4)
    assert out["min_s"] == STALL_MIN_S and (out["days"] > 0) == (stalls > 0)


def test_the_cli_prints_the_json_the_issue_names_and_refuses_philly(tmp_path):
    rows = [(k, 60.0 * k, 0.0, 600.0, 1, 900.0) for k in range(1, 30)]
    trace = tmp_path / "t.swf"
    trace.write_text(_swf(rows, 8))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    for key in ("recorded_mean_wait_s", "model_mean_wait_s", "median_abs_rel_error", "share_within_2x"):
        assert key in rep
    assert rep["wait_floor_s"] == WAIT_FLOOR_S
    assert rep["recorded_stalls"]["count"] == 0  # a job a minute, none waiting
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--calibrate"])
    assert r.exit_code == 0 and "within 2x" in r.output and "the record stalls 0 times" in r.output
    philly = tmp_path / "p.csv"
    philly.write_text("1,0,x,y,2,3600\n2,60,x,y,1,600\n")
    r = CliRunner().invoke(app, ["simulate", "--trace", str(philly), "--format", "philly", "--calibrate"])
    assert r.exit_code != 0 and "records no waits" in r.output


def test_a_scheduler_in_passes_starts_each_job_at_the_next_pass(tmp_path):
    # one free 4-CPU site (times count from the trace's first submission); jobs arrive at 0, 3,900 s (after
    # the first ends at 3,600 s) and 8,900 s: at every event each starts at once; in 1,800 s passes at 0,
    # 5,400 and 9,000 s
    rows = [(1, 0.0, 0.0, 3600.0, 4, 3600.0), (2, 3900.0, 0.0, 600.0, 4, 600.0),
            (3, 8900.0, 0.0, 60.0, 4, 60.0)]
    trace = tmp_path / "passes.swf"
    trace.write_text(_swf(rows, 4))
    assert calibrate_trace(trace)["model_mean_wait_s"] == 0.0
    rep = calibrate_trace(trace, sched_pass_s=1800.0)
    assert rep["sched_pass_s"] == 1800.0
    assert rep["model_mean_wait_s"] == pytest.approx((0.0 + 1500.0 + 100.0) / 3, abs=0.1)


def test_the_cli_takes_the_scheduler_pass(tmp_path):
    # the second job (1 of 4 CPUs free to it) waits for the pass at 1,800 s, as the site's record says
    rows = [(1, 0.0, 0.0, 3600.0, 1, 3600.0), (2, 100.0, 1700.0, 3600.0, 1, 3600.0)]
    trace = tmp_path / "two.swf"
    trace.write_text(_swf(rows, 4))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--json", "--sched-pass-s", "1800"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["sched_pass_s"] == 1800.0 and rep["share_within_2x"] == 1.0


def test_a_stall_s_share_of_the_recorded_wait_counts_the_waits_that_span_it():
    # job 2 waited 10 h across the stall, job 4 waited 1 h while the site was busy: 10 of the 11 hours
    jobs = [_ran(1, 0, 0, 100, 2), _ran(2, 10, 10 * H, 60, 2), _ran(3, 10 * H + 5, 0, 2 * H, 10),
            _ran(4, 10 * H + 10, H - 5, 60, 2)]
    out = recorded_stalls(jobs, capacity=10)
    assert out["count"] == 1 and out["share_of_jobs_waiting_across"] == 0.25
    assert out["share_of_recorded_wait_across"] == pytest.approx((10 * H) / (11 * H - 5), abs=1e-4)
