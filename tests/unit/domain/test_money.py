from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from burstd.domain.money import cost_micros, format_usd, micros_to_usd, usd_to_micros


def test_conversions_are_exact():
    assert usd_to_micros("11.80") == 11_800_000
    assert usd_to_micros(0.1) == 100_000
    assert micros_to_usd(1) == Decimal("0.000001")
    assert format_usd(412_004_999) == "$412.00"


@pytest.mark.parametrize("bad", ["nan", "inf", float("nan"), float("-inf")])
def test_non_finite_money_is_refused(bad):
    with pytest.raises(ValueError, match="finite"):
        usd_to_micros(bad)


def test_cost_of_an_hour_is_the_price():
    assert cost_micros(11_800_000, 3600) == 11_800_000
    assert cost_micros(11_800_000, 1800) == 5_900_000


@given(st.integers(0, 10**9), st.integers(0, 10**6))
def test_cost_is_monotonic_in_time(price, seconds):
    assert cost_micros(price, seconds) <= cost_micros(price, seconds + 1)


@pytest.mark.parametrize("micros, shown", [
    (0, "$0.00"),
    (3_682, "<$0.01"),  # a few seconds of a cheap VM is not "nothing"
    (4_999, "<$0.01"),
    (5_000, "$0.01"),  # half a cent rounds up, as people expect of money
    (15_000, "$0.02"),
    (25_000, "$0.03"),  # half-up, not half-even
    (1_234_567_890, "$1,234.57"),
    (-500_000, "-$0.50"),
    (-1, "-<$0.01"),
])
def test_one_rule_formats_every_shown_amount(micros, shown):
    assert format_usd(micros) == shown
