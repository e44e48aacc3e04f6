"""Waiting policies: none, constant, compute, burstd."""

from __future__ import annotations

import pytest

from burstd.config import WaitingPolicy
from burstd.policy.waiting import format_duration, required_wait_s, verdict

W = WaitingPolicy(min_wait_s=600, wait_per_node_hour_s=60, max_wait_s=7200, min_expected_wait_s=1800,
                  burstd_wait_per_node_hour_s=600, burstd_min_wait_s=120, wait_value_per_hour=0)


def v(kind, waited, expected, node_hours=1.0, limit=3600.0, keep=False, floor=0.0):
    return verdict(W.model_copy(update={"kind": kind}), waited_s=waited, expected_wait_s=expected,
                   node_hours=node_hours, time_limit_s=limit, floor_s=floor, keep=keep)


@pytest.mark.parametrize("kind, node_hours, want", [
    ("none", 100, 0), ("constant", 100, 600), ("compute", 1, 600), ("compute", 50, 3000), ("compute", 1000, 7200),
])
def test_required_wait_grows_with_size_only_for_compute(kind, node_hours, want):
    assert required_wait_s(W.model_copy(update={"kind": kind}), node_hours) == want


def test_floor_applies_to_every_kind():
    assert required_wait_s(W.model_copy(update={"kind": "none"}), 1, floor_s=900) == 900
    assert not v("none", 800, 99999, floor=900).ready


def test_burstd_keeps_a_job_whose_on_prem_start_is_near_however_long_it_waited():
    r = v("burstd", waited=10 * 3600, expected=600)
    assert not r.ready and "sooner than the 30 min worth bursting for" in r.why


def test_burstd_bursts_a_long_predicted_wait_at_once_but_not_before_its_minimum():
    assert v("burstd", waited=130, expected=4 * 3600, node_hours=10).ready  # 4 h >= 600 s x 10 node-h
    assert not v("burstd", waited=60, expected=4 * 3600, node_hours=10).ready
    # a big job predicted to wait less than its size warrants waits out the compute-wait
    big = v("burstd", waited=130, expected=2 * 3600, node_hours=100)
    assert not big.ready and "wants 1.7 h" in big.why
    assert v("burstd", waited=6000, expected=2 * 3600, node_hours=100).ready


def test_keep_fraction_gives_hysteresis():
    assert not v("burstd", waited=1000, expected=1000).ready
    assert v("burstd", waited=1000, expected=1000, keep=True).ready  # 1000 >= 0.5 x 1800


def test_durations_read_well():
    assert [format_duration(x) for x in (45, 14 * 60, 3 * 3600, 2.5 * 86400, float("inf"))] == [
        "45 s", "14 min", "3 h", "2.5 d", "forever"]


def test_burstd_quotes_one_waiting_target_that_does_not_move_when_its_first_step_passes():
    # expected 40 min: past "soon" (30 min), short of bursting at once (600 s x 10 node-h): compute-wait 10 min
    before = v("burstd", waited=60, expected=2400, node_hours=10)
    after = v("burstd", waited=200, expected=2400, node_hours=10)
    assert not before.ready and not after.ready
    assert before.why == after.why == "waiting policy burstd wants 10 min on-prem first"


def test_with_a_value_of_waiting_the_burstd_kind_leaves_step_three_to_decide():
    """``wait_value_per_hour`` > 0: past the first wait and the "start is near" check the job is ready here;
    ``decide()`` then weighs the wait it saves against its expected bill (tests/unit/policy/test_value_rule.py)."""
    vw = W.model_copy(update={"kind": "burstd", "wait_value_per_hour": 5.0})
    ready = verdict(vw, waited_s=130, expected_wait_s=2 * 3600, node_hours=100, time_limit_s=3600)
    assert ready.ready  # compute-wait would have wanted 1.7 h first
    assert not verdict(vw, waited_s=60, expected_wait_s=2 * 3600, node_hours=100, time_limit_s=3600).ready
    assert not verdict(vw, waited_s=600, expected_wait_s=600, node_hours=1, time_limit_s=3600).ready
