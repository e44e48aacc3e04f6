"""The progress record: replaced whole, readable by the daemon and burstctl, rate from moved bytes only."""

from __future__ import annotations

import json

import pytest

from burstd.data.progress import ProgressFile, read_progress


def test_the_record_says_how_far_and_how_fast_and_ends_done_or_failed(tmp_path):
    t = [100.0]
    p = ProgressFile(tmp_path / "job42.json", "in", interval_s=10, clock=lambda: t[0])
    p.record.bytes_total = 300
    p.reused(100)
    t[0] = 102.0
    p.moved(100)  # within the interval: not written yet
    assert read_progress(tmp_path / "job42.json").bytes_done == 100
    p.finish()
    rec = read_progress(tmp_path / "job42.json")
    assert (rec.state, rec.bytes_done, rec.bytes_reused, rec.rate_bytes_s) == ("done", 200, 100, 50.0)
    p.finish(error="link down")
    assert read_progress(tmp_path / "job42.json").error == "link down"
    assert [f.name for f in tmp_path.iterdir()] == ["job42.json"]  # no temporary left behind


def test_a_file_that_is_not_a_record_is_named(tmp_path):
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"version": 1, "nope": 1}))
    with pytest.raises(ValueError, match="x.json"):
        read_progress(f)
