"""The crash test proves every named crash point fires: each point of ``faults.POINTS`` is placed in the code, and
some chain of the crash test (tests/integration/crash_storm.py) crashes the daemon there."""

from __future__ import annotations

import re
from pathlib import Path

import burstd
from burstd.faults import POINTS
from tests.integration.crash_storm import chained_points


def placed_points() -> set[str]:
    root = Path(burstd.__file__).parent
    return {m for f in root.rglob("*.py") for m in re.findall(r'crash_point\("([^"]+)"\)', f.read_text())}


def test_every_named_point_is_placed_in_the_code_and_every_placed_point_is_named():
    assert len(POINTS) == len(set(POINTS))
    assert len(placed_points()) > 10  # the scan finds the calls at all
    assert placed_points() == set(POINTS)


def test_every_crash_point_is_in_some_chain_of_the_crash_test():
    assert chained_points() == set(POINTS), (set(POINTS) - chained_points(), chained_points() - set(POINTS))
