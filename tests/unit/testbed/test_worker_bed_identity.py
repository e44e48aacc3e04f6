"""Each pytest-xdist worker's bed, and so every side bed a test brings up at ``slot + offset``, sits on a slot of
its own: CI once failed when one test took the environment's base slot while another worker's test took its
worker's slot at the same offset (two side beds on one subnet)."""

from __future__ import annotations

import pytest

from tests.bed import worker_bed_identity


@pytest.mark.parametrize(("worker", "expected"), [("", ("mine", 5)), ("gw0", ("mine", 5)),
                                                  ("gw2", ("mine-w2", 7))])
def test_each_worker_has_a_slot_and_name_of_its_own(monkeypatch, worker, expected):
    monkeypatch.setenv("BURSTD_BED_NAME", "mine")
    monkeypatch.setenv("BURSTD_BED_SLOT", "5")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    assert worker_bed_identity() == expected


def test_side_beds_of_two_workers_at_one_offset_never_share_a_slot(monkeypatch):
    monkeypatch.setenv("BURSTD_BED_SLOT", "0")
    slots = set()
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slots.add(worker_bed_identity().slot + 71)
    assert len(slots) == 3
