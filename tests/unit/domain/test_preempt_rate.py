import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstd.domain.lease import Lease, LeaseEvent, LeaseState
from burstd.domain.preempt_rate import MAX_RATE, PoolRate, checkpoint_view, observed_rate, rate_text

NOW = 1_000_000.0
H = 3600.0


def lease(lid: str, ready: float | None, ended: float | None = None, pool: str = "spot") -> Lease:
    state = LeaseState.READY if ended is None else LeaseState.TERMINATED
    return Lease(lid, pool, "cloud-" + lid, state, ready_at=ready, ended_at=ended)


def failed(lid: str, at: float, reason: str) -> LeaseEvent:
    return LeaseEvent(lid, at, LeaseState.READY, LeaseState.FAILED, reason)


def test_preemptions_per_node_hour_of_the_pool_only():
    leases = [lease("a", NOW - 2 * H, NOW - H), lease("b", NOW - 3 * H), lease("c", NOW - 5 * H, pool="other")]
    events = [failed("a", NOW - H, "preempted: notice deadline 1 passed"),
              failed("c", NOW - H, "preempted: the provider reclaimed the instance")]
    rate = observed_rate("spot", leases, events, now=NOW)
    assert (rate.preemptions, rate.node_hours) == (1, pytest.approx(4.0))  # a: 1 h, b: 3 h so far
    assert rate.per_node_hour == pytest.approx(0.25)


def test_a_lost_node_that_was_not_preempted_does_not_count():
    rate = observed_rate("spot", [lease("a", NOW - 2 * H, NOW - H)], [failed("a", NOW - H, "boot timeout")], now=NOW)
    assert rate.preemptions == 0 and rate.per_node_hour == 0.0


def test_too_little_history_and_no_preemption_is_unknown_not_zero():
    rate = observed_rate("spot", [lease("a", NOW - 600)], [], now=NOW)
    assert rate.per_node_hour is None and rate.node_hours == pytest.approx(600 / H)
    assert observed_rate("spot", [], [], now=NOW).per_node_hour is None
    assert observed_rate("spot", [lease("a", None)], [], now=NOW).per_node_hour is None  # never ran


def test_one_preemption_in_a_short_history_already_says_something():
    rate = observed_rate("spot", [lease("a", NOW - 900, NOW)], [failed("a", NOW, "preempted: x")], now=NOW)
    assert rate.per_node_hour == pytest.approx(4.0)


def test_only_the_window_counts():
    leases = [lease("old", NOW - 30 * H, NOW - 20 * H), lease("new", NOW - 10 * H)]
    events = [failed("old", NOW - 20 * H, "preempted: x")]
    rate = observed_rate("spot", leases, events, now=NOW, window_s=12 * H)
    assert (rate.preemptions, rate.node_hours, rate.per_node_hour) == (0, pytest.approx(10.0), 0.0)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_rate_text_is_a_plain_number_or_refused(x):
    try:
        text = rate_text(x)
    except ValueError as exc:
        assert not (math.isfinite(x) and 0 <= x <= MAX_RATE)
        assert "preemption rate" in str(exc)
        return
    assert set(text) <= set("0123456789.e+-") and float(text) == pytest.approx(x, rel=1e-5, abs=1e-300)


def test_checkpoint_view_turns_rate_step_and_save_into_steps():
    view = checkpoint_view(PoolRate("spot", 2, 1.0, 2.0), nodes=1, step_time_s=0.5, save_cost_s=4.0)
    assert (view["interval_steps"], view["mtbf_s"]) == (235, 1800.0)  # burstd.train.interval's own example
    assert "checkpoint every 235 steps" in str(view["sentence"]) and "2 in 1.0 h" in str(view["sentence"])
    assert checkpoint_view(PoolRate("spot", 2, 1.0, 2.0), nodes=2, step_time_s=None)["mtbf_s"] == 900.0
    assert "unknown" in str(checkpoint_view(PoolRate("spot", 0, 0.1, None), nodes=1, step_time_s=1.0)["sentence"])
    assert "none periodic" in str(checkpoint_view(PoolRate("spot", 0, 9.0, 0.0), nodes=1, step_time_s=1.0)["sentence"])
