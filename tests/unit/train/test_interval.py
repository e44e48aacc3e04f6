"""Young/Daly checkpoint interval: properties against the exact expected cost of exponential preemptions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstd.train.interval import (
    RATE_ENV,
    choose_interval,
    daly_interval_s,
    rate_from_env,
    young_interval_s,
)
from tests.hypothesis_profiles import examples

costs = st.floats(min_value=0.01, max_value=600.0)
mtbfs = st.floats(min_value=60.0, max_value=30 * 86400.0)


def wall_per_work(interval_s: float, save_s: float, mtbf_s: float) -> float:
    """Expected wall seconds per second of work: segments of ``interval_s`` work + a save, any preemption
    (exponential, mean ``mtbf_s``) losing the segment; restart cost 0 (Daly 2006, eq. 8 with R=0)."""
    return mtbf_s * math.expm1((interval_s + save_s) / mtbf_s) / interval_s


@settings(max_examples=examples(300), deadline=None)
@given(costs, mtbfs)
def test_daly_is_within_a_percent_of_the_exact_optimum(save_s, mtbf_s):
    if save_s >= mtbf_s / 2:  # the formula's regime (a save costing half an MTBF is hopeless anyway)
        return
    chosen = wall_per_work(daly_interval_s(save_s, mtbf_s), save_s, mtbf_s)
    grid = [mtbf_s * 10 ** (k / 200) for k in range(-1200, 201)]  # 1e-6 M .. 10 M, 0.5% apart
    best = min(wall_per_work(t, save_s, mtbf_s) for t in grid)
    assert chosen <= best * 1.01


@settings(max_examples=examples(200), deadline=None)
@given(costs, mtbfs)
def test_daly_approaches_young_when_saves_are_cheap_and_beats_fixed_guesses(save_s, mtbf_s):
    daly, young = daly_interval_s(save_s, mtbf_s), young_interval_s(save_s, mtbf_s)
    if save_s < mtbf_s / 1000:
        assert abs(daly - young) / young < 0.05
    if save_s < mtbf_s / 2:
        for off in (0.5, 2.0):  # half or twice the interval is never better
            assert wall_per_work(daly, save_s, mtbf_s) <= wall_per_work(daly * off, save_s, mtbf_s) * (1 + 1e-9)


@settings(max_examples=examples(200), deadline=None)
@given(costs, costs, mtbfs, mtbfs)
def test_interval_grows_with_save_cost_and_with_mtbf(c1, c2, m1, m2):
    (c1, c2), (m1, m2) = sorted((c1, c2)), sorted((m1, m2))
    assert daly_interval_s(c1, m2) <= daly_interval_s(c2, m2) * (1 + 1e-9) or c2 >= 2 * m2
    assert daly_interval_s(c1, m1) <= daly_interval_s(c1, m2) * (1 + 1e-9)


@settings(max_examples=examples(200), deadline=None)
@given(costs, st.floats(min_value=0.001, max_value=600.0), st.floats(min_value=0.01, max_value=50.0),
       st.integers(min_value=1, max_value=64))
def test_steps_are_whole_positive_and_more_nodes_checkpoint_no_less_often(save_s, step_s, rate, nodes):
    one = choose_interval(save_cost_s=save_s, step_s=step_s, preemptions_per_hour=rate, nodes=1)
    many = choose_interval(save_cost_s=save_s, step_s=step_s, preemptions_per_hour=rate, nodes=nodes)
    assert one.steps >= 1 and many.steps >= 1
    assert many.steps <= one.steps
    assert str(one.steps) in one.why and "Young/Daly" in one.why


def test_worked_example():
    # a 4 s save, 2 preemptions an hour (M = 30 min): Young says sqrt(2*4*1800) = 120 s, Daly a little less
    assert young_interval_s(4.0, 1800.0) == pytest.approx(120.0)
    assert daly_interval_s(4.0, 1800.0) == pytest.approx(120 * (1 + math.sqrt(4 / 3600) / 3 + 4 / 3600 / 9) - 4)
    interval = choose_interval(save_cost_s=4.0, step_s=0.5, preemptions_per_hour=2.0)
    assert interval.steps == round(daly_interval_s(4.0, 1800.0) / 0.5) == 235


def test_rate_zero_means_no_periodic_checkpoint():
    assert choose_interval(save_cost_s=3.0, step_s=1.0, preemptions_per_hour=0.0).steps == 0


def test_a_save_dearer_than_two_mtbfs_checkpoints_every_mtbf():
    assert daly_interval_s(100.0, 40.0) == 40.0


@pytest.mark.parametrize("raw, expected", [(None, None), ("", None), ("0", 0.0), ("2.5", 2.5)])
def test_rate_from_env(raw, expected):
    assert rate_from_env({} if raw is None else {RATE_ENV: raw}) == expected


@pytest.mark.parametrize("raw", ["fast", "-1", "inf", "nan"])
def test_bad_rate_names_the_variable(raw):
    with pytest.raises(ValueError, match=RATE_ENV):
        rate_from_env({RATE_ENV: raw})


@pytest.mark.parametrize("kw", [dict(save_cost_s=-1.0), dict(step_s=0.0), dict(preemptions_per_hour=math.nan),
                                dict(nodes=0)])
def test_bad_inputs_are_refused(kw):
    args = dict(save_cost_s=1.0, step_s=1.0, preemptions_per_hour=1.0, nodes=1) | kw
    with pytest.raises(ValueError):
        choose_interval(**args)
