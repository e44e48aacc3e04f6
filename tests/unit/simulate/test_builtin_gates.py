"""The built-in sites' gates in front of burstd's value rule: no first wait, a 5-minute "start is near".

Both gates predate the value rule; under it they only hold back bursts the rule has already priced as worth
their bill (docs/policy.md, "How the defaults were tuned", step 4). No spot here: the replays are exact.
"""

from __future__ import annotations

from burstd.simulate.policies import make_setup, policy_simulator
from burstd.simulate.traces import TraceInfo, TraceJob

INFO = TraceInfo("swf", max_procs=8, max_nodes=1)  # one 8-CPU node on-prem


def replay(jobs: list[TraceJob]) -> dict[int, tuple[bool, float | None]]:
    """burstd on the built-in CPU site (its defaults untouched): (burst, first start) by job id."""
    setup = make_setup(INFO, False, None, None, None, None, boot_s=120.0, cycle_s=120.0)
    sim = policy_simulator("burstd", setup, jobs)
    res = sim.run()
    assert res.jobs == len(jobs) and res.unfinished == 0
    return {j.tj.job_id: (j.burst, j.first_start) for j in sim.done}


def test_a_job_facing_hours_of_wait_bursts_at_the_first_cycle_not_after_a_first_wait():
    # job 1 holds the node for 10 h; job 2 would wait all of that and its hour of cloud is cheap next to it
    out = replay([TraceJob(1, 0, 36000, 36000, 8), TraceJob(2, 10, 3600, 3600, 8)])
    burst, start = out[2]
    assert burst
    assert start == 120 + 120  # decided at the first cycle after submission, then one boot (was 600 s later)


def test_a_quarter_hour_wait_is_weighed_by_the_value_rule_not_held_by_a_half_hour_floor():
    # job 2 would start on-prem at 1,000 s: 13 minutes of wait at the first cycle, worth more than an
    # hour on one spot node; the old 30-minute "start is near" floor kept it home
    out = replay([TraceJob(1, 0, 1000, 1000, 8), TraceJob(2, 10, 3600, 3600, 8)])
    assert out[2] == (True, 240)


def test_a_start_minutes_away_still_stays_home():
    # under 5 minutes to go at the first cycle: bursting (two of them boot) cannot beat it
    out = replay([TraceJob(1, 0, 400, 400, 8), TraceJob(2, 10, 3600, 3600, 8)])
    assert out[2] == (False, 400)
