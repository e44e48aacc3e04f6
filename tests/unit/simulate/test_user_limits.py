"""Per-user running limits of the on-prem model (``burstd.simulate.limits``; issue 25, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.simulate.limits import NO_LIMITS, UserLimits, UserRunning
from burstd.simulate.policies import make_setup, policy_simulator
from burstd.simulate.report import simulate_trace
from burstd.simulate.traces import TraceInfo, TraceJob

DATA = Path(__file__).resolve().parents[2] / "data" / "simulate"
H = 3600.0


def job(jid: int, submit: float, cpus: int, run: float, user: str, limit: float | None = None) -> TraceJob:
    return TraceJob(jid, submit, run, limit or run, cpus, user=user)


def starts(jobs: list[TraceJob], cpus: int, limits: UserLimits = NO_LIMITS,
           out_of_order: bool = False) -> dict[int, float | None]:
    """Each job's first on-prem start in a no-burst replay on a ``cpus``-CPU site of one-CPU nodes."""
    setup = make_setup(TraceInfo("swf", max_procs=cpus, max_nodes=cpus), False, None, None, None, None,
                       user_limits=limits, out_of_order=out_of_order)
    sim = policy_simulator("never", setup, jobs)
    sim.run()
    return {j.tj.job_id: j.first_start for j in sim.done}


def test_a_users_job_past_its_limit_waits_while_cpus_are_free_and_another_users_starts():
    # 8 CPUs; alice queues 3 one-CPU jobs of 1 h at once, then bob one: 4 CPUs would do for all of them
    jobs = [job(1, 0.0, 1, H, "alice"), job(2, 0.0, 1, H, "alice"), job(3, 0.0, 1, H, "alice"),
            job(4, 0.0, 1, H, "bob")]
    assert starts(jobs, 8) == {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    # at most 2 running jobs a user: alice's third waits for her first to end, bob's passes it
    assert starts(jobs, 8, UserLimits(max_jobs=2)) == {1: 0.0, 2: 0.0, 3: H, 4: 0.0}
    # the same without a backfill reservation (Starburst's "loop", --out-of-order)
    assert starts(jobs, 8, UserLimits(max_jobs=2), out_of_order=True) == {1: 0.0, 2: 0.0, 3: H, 4: 0.0}


def test_a_cpu_limit_holds_a_users_cpus_and_lets_a_wider_job_run_alone():
    # at most 4 CPUs a user: alice's two 2-CPU jobs fill her share, her third waits; bob's 6-CPU job is wider
    # than the limit but starts, as he runs nothing else (else it could never start)
    jobs = [job(1, 0.0, 2, H, "alice"), job(2, 0.0, 2, H, "alice"), job(3, 0.0, 2, 2 * H, "alice"),
            job(4, 0.0, 6, H, "bob"), job(5, 10.0, 1, H, "bob")]
    got = starts(jobs, 16, UserLimits(max_units=4))
    assert got[1] == got[2] == got[4] == 0.0
    assert got[3] == H  # one of alice's jobs ended: 2 + 2 <= 4
    assert got[5] == H  # bob holds 6 of his 4 until his wide job ends, 11 CPUs free or not


def test_a_job_its_users_limit_blocks_holds_back_neither_the_queue_nor_the_backfill():
    # 4 CPUs. alice runs a 10 h job and bob a 1 h one (2 CPUs free). Then a 2-CPU job waits and carol's
    # 2-CPU job with a 5 h limit arrives behind it.
    def trace(waiting_user: str, waiting_cpus: int) -> list[TraceJob]:
        return [job(1, 0.0, 1, 10 * H, "alice"), job(2, 0.0, 1, H, "bob"),
                job(3, 10.0, waiting_cpus, H, waiting_user), job(4, 20.0, 2, 5 * H, "carol")]

    # alice's second job is blocked by her limit of one running job: carol's starts at once, and alice's
    # starts only when her first ends (10 h), though CPUs were free before
    got = starts(trace("alice", 2), 4, UserLimits(max_jobs=1))
    assert got[4] == 20.0 and got[3] == 10 * H
    # the same queue with dave's 3-CPU job at the head, held by CPUs, not a limit: it reserves the CPUs bob's
    # job frees at 1 h, so carol's 5 h job may not backfill (EASY) and waits behind it
    got = starts(trace("dave", 3), 4, UserLimits(max_jobs=1))
    assert got[3] == H and got[4] > H


@pytest.mark.parametrize("limits", [NO_LIMITS, UserLimits(max_jobs=10**6, max_units=10**6)])
def test_no_limit_and_a_limit_nobody_reaches_replay_exactly_as_before(limits, tmp_path):
    # every policy on the pinned mini trace (test_replay_pinned.py): off, and on with a limit nobody reaches
    # (every limit check runs and passes), give the figures of a replay without the option to the bit
    before = simulate_trace(DATA / "mini.swf")
    after = simulate_trace(DATA / "mini.swf", user_limits=limits)
    for name, row in before["policies"].items():
        clock = ("wall_s", "cpu_s")  # how long the replay took, not what it replayed
        assert {k: v for k, v in after["policies"][name].items() if k not in clock} == \
            {k: v for k, v in row.items() if k not in clock}, name


def test_a_limit_changes_the_replay_of_a_trace_with_busy_users():
    off = simulate_trace(DATA / "mini.swf", policies=["never"], market="on-demand")
    on = simulate_trace(DATA / "mini.swf", policies=["never"], market="on-demand", user_limits=UserLimits(1))
    assert on["policies"]["never"]["wait_mean_s"] > off["policies"]["never"]["wait_mean_s"]
    assert on["user_max_running_jobs"] == 1 and off["user_max_running_jobs"] == 0
    assert any("per-user limit on-prem: at most 1 running jobs" in a for a in on["assumptions"])


def test_the_running_count_follows_starts_and_ends():
    r = UserRunning(UserLimits(max_jobs=2, max_units=3))
    assert r.allows("a", 5)  # nothing running: even a job wider than the CPU limit
    r.start("a", 2)
    assert r.allows("a", 1) and not r.allows("a", 2)
    r.start("a", 1)
    assert not r.allows("a", 1) and r.allows("b", 1)
    r.end("a", 2)
    r.end("a", 1)
    assert r.jobs == {} and r.units == {}


def test_a_negative_limit_is_refused_by_name():
    with pytest.raises(ValueError, match="user_max_running_jobs -1"):
        UserLimits(max_jobs=-1)
    with pytest.raises(ValueError, match="user_max_running_cpus -2"):
        UserLimits(max_units=-2)


def _swf(tmp_path: Path) -> Path:
    # 8 CPUs; user 1 queues four 1-CPU jobs of 1 h at once; the site recorded 0, 0, 1 h, 1 h: a limit of 2
    head = "; MaxProcs: 8\n; MaxNodes: 8\n"
    rows = [(1, 0), (2, 0), (3, 3600), (4, 3600)]
    p = tmp_path / "busy.swf"
    p.write_text(head + "".join(f"{i} 0 {w} 3600 1 -1 -1 1 3600 -1 1 1 1 -1 1 -1 -1 -1\n" for i, w in rows))
    return p


def test_the_cli_takes_the_limits_for_calibrate_and_the_replay(tmp_path):
    trace = _swf(tmp_path)
    cli = CliRunner()
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--json"])
    assert r.exit_code == 0, r.output
    off = json.loads(r.stdout)
    assert off["user_max_running_jobs"] == 0 and off["share_within_2x"] == 0.5
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--json", "--user-max-running-jobs", "2"])
    assert r.exit_code == 0, r.output
    on = json.loads(r.stdout)
    assert on["user_max_running_jobs"] == 2 and on["share_within_2x"] == 1.0 and on["mean_ratio"] == 1.0
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--json", "--user-max-running-cpus", "2"])
    assert r.exit_code == 0 and json.loads(r.stdout)["user_max_running_cpus"] == 2
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--policy", "never", "--json", "--market",
                         "on-demand", "--user-max-running-jobs", "2"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["user_max_running_jobs"] == 2 and rep["policies"]["never"]["wait_mean_s"] == 1800.0
    r = cli.invoke(app, ["simulate", "--trace", str(trace), "--calibrate", "--user-max-running-jobs", "-1"])
    assert r.exit_code != 0


def test_the_calibrate_table_names_the_limit(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--trace", str(_swf(tmp_path)), "--calibrate", "--wide",
                                 "--user-max-running-jobs", "2", "--user-max-running-cpus", "3"])
    assert r.exit_code == 0, r.output
    assert "at most 2 running jobs and 3 CPUs a user" in " ".join(r.output.split())
    assert UserLimits(0, 5).caps("GPUs") == "5 GPUs" and NO_LIMITS.caps() == ""
