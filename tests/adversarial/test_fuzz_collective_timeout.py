"""Any value of the timeout variables: a finite positive timeout, or a ValueError that names the variable."""

from __future__ import annotations

import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from burstd.train.collectives import CHECKPOINT_TIMEOUT_ENV, TIMEOUT_ENV, checkpoint_timeout, collective_timeout

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))


@settings(max_examples=EXAMPLES)
@given(st.text(max_size=40) | st.floats().map(str) | st.integers().map(str))
def test_any_value_is_a_positive_finite_timeout_or_a_clear_error(raw):
    for key, read in ((TIMEOUT_ENV, collective_timeout), (CHECKPOINT_TIMEOUT_ENV, checkpoint_timeout)):
        try:
            timeout = read({key: raw})
        except ValueError as exc:
            assert str(exc).startswith(f"{key} must be"), exc
            continue
        seconds = timeout.total_seconds()
        assert math.isfinite(seconds) and seconds > 0
