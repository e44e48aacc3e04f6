"""``burstctl data progress``: the staging records as a table and as JSON; a file that is not one is named."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.data.progress import ProgressFile


def record(path, state="running", error=None):
    p = ProgressFile(path, "in", clock=lambda: 100.0)
    p.record.bytes_total, p.record.files_total = 4 << 20, 2
    p.record.started_at = 98.0
    p.reused(1 << 20)
    p.moved(1 << 20)
    if state != "running":
        p.finish(error)
    else:
        p.write()
    return path


def test_the_table_shows_how_far_how_fast_and_what_is_left(tmp_path):
    f = record(tmp_path / "4242-in.json")
    out = CliRunner().invoke(app, ["data", "progress", str(f), "--wide"])
    assert out.exit_code == 0, out.output
    assert "4242-in.json" in out.output and "running" in out.output
    assert "2.0 MiB of 4.0 MiB (50%)" in out.output and "512.0 KiB/s" in out.output and "4 s" in out.output


def test_json_carries_every_field_and_a_failure_says_why(tmp_path):
    f = record(tmp_path / "x.json", state="failed", error="link down")
    out = CliRunner().invoke(app, ["data", "progress", str(f), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc[0]["state"] == "failed" and doc[0]["error"] == "link down" and doc[0]["bytes_reused"] == 1 << 20


def test_a_file_that_is_not_a_record_is_named_with_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    out = CliRunner().invoke(app, ["data", "progress", str(bad)])
    assert out.exit_code == 2 and "bad.json" in out.output
