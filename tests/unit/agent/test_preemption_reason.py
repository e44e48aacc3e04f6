from __future__ import annotations

import pytest

from burstd.domain.preemption import Notice, parse_iso, parse_preemption_reason, preemption_reason
from burstd.slurm.base import check_reason


@pytest.mark.parametrize(
    "kind,action", [("interruption", "terminate"), ("interruption", "stop"), ("rebalance", "rebalance")]
)
def test_reason_round_trips_and_is_a_valid_slurm_reason(kind, action):
    n = Notice(kind, action, 1_900_000_123.0, "gcp")
    reason = preemption_reason(n)
    assert check_reason(reason) == reason
    assert parse_preemption_reason(reason) == n


@pytest.mark.parametrize(
    "reason",
    [
        None,
        "",
        "POWER_DOWN_ASAP",
        "burstd-preempt: terminate at never (aws)",
        "burstd-preempt terminate at 2026-11-22T00:00:00Z (aws)",
    ],
)
def test_foreign_reasons_are_not_notices(reason):
    assert parse_preemption_reason(reason) is None


def test_parse_iso_accepts_offsets_and_fractions():
    assert parse_iso("2026-11-22T00:00:00Z") == parse_iso("2026-11-22T01:00:00.000+01:00")
