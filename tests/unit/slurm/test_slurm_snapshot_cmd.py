"""``burstctl snapshot --from FILE ... --json``: replaying saved Slurm output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from tests.conftest import FIXTURES

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05"
runner = CliRunner(env={"COLUMNS": "400"})  # no wrapping in rich output


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """burstctl's rich console is made at import, with whatever width that process had then (another test's
    COLUMNS, or 80 without a terminal): make it wide for these tests whatever ran before in this process."""
    from burstd.cli import common

    monkeypatch.setattr(common.console, "_width", 400)  # restored afterwards (the width property would not be)


def test_snapshot_from_2205_text_and_json_files():
    res = runner.invoke(app, ["snapshot", "--from", str(DATA / "squeue_text.txt"), "--from", str(DATA / "sinfo.json"),
                              "--from", str(DATA / "scontrol_show_partitions_o.txt"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["slurm_version"] == "22.05.8"
    assert len(data["jobs"]) == 11 and {p["name"] for p in data["partitions"]} == {"onprem", "cloud"}
    drained = next(n for n in data["nodes"] if n["name"] == "mbc4")
    assert "DRAIN" in drained["flags"] and drained["reason"] == "maintenance window"


def test_snapshot_from_2411_files_all_jobs_and_table():
    files = [str(FIXTURES / "24.11" / f) for f in ("squeue_t_all.json", "scontrol_show_nodes.json",
                                                   "scontrol_show_partitions.json")]
    active = json.loads(runner.invoke(app, ["snapshot", *sum((["--from", f] for f in files), []), "--json"]).stdout)
    every = json.loads(runner.invoke(app, ["snapshot", *sum((["--from", f] for f in files), []), "--all-jobs",
                                           "--json"]).stdout)
    assert len(every["jobs"]) == 21 and len(active["jobs"]) == 16
    table = runner.invoke(app, ["snapshot", *sum((["--from", f] for f in files), [])])
    assert table.exit_code == 0 and "gpu_cloud" in table.stdout and "maintenance window" in table.stdout


def test_snapshot_from_a_file_that_is_not_slurm_output_fails_clearly(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    res = runner.invoke(app, ["snapshot", "--from", str(bad), "--json"])
    assert res.exit_code == 1 and "notes.txt" in res.output and "not a Slurm JSON document" in res.output
    res = runner.invoke(app, ["snapshot", "--from", str(tmp_path / "missing.json")])
    assert res.exit_code == 1 and "missing.json" in res.output
    broken = tmp_path / "broken.json"
    broken.write_text('{"jobs": [')
    res = runner.invoke(app, ["snapshot", "--from", str(broken)])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "broken.json: not JSON" in flat
