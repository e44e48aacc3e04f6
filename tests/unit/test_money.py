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
