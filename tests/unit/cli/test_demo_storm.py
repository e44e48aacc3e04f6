"""`burstctl demo --storm`'s own parts (burstd/cli/demo_storm.py, demo_cmd.py): the per-job table, the exit status
the done rule gives, and the options it does not combine with. The figures and the rule: test_storm_summary.py;
the live run: `burstctl demo --storm` on a bed and tests/integration/test_preemption_storm.py."""

from __future__ import annotations

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from burstd.cli import demo_cmd
from burstd.cli.demo_storm import storm_table

JOB = {"job_id": 3, "nodes": 2, "ranks": 4, "preemptions_with_notice": 1, "preemptions_without_notice": 1,
       "steps_redone_with_notice": 0, "steps_redone_without_notice": 1, "checkpoint_interval_steps": 10,
       "back_to_training_s": [21.4, None], "back_to_training_with_notice_s": [21.4], "interruptions_seen": 2,
       "bit_identical": True}
SUMMARY = {"jobs_submitted": 1, "jobs_completed": 1, "leaked_vms": 0, "finished": True, "failures": [],
           "jobs": {"m": JOB}}


def test_the_table_has_a_row_a_job_with_flat_values():
    out = Console(width=160, force_terminal=False, record=True)
    out.print(storm_table(SUMMARY))
    text = out.export_text()
    row = next(line for line in text.splitlines() if "│ m " in line)
    for cell in ("2", "4", "1, 1", "0, 1", "10", "21.4, -", "yes"):
        assert cell in row, (cell, row)
    assert "{" not in text and "None" not in text and "True" not in text


def test_the_exit_status_follows_the_done_rule(tmp_path):
    out = tmp_path / "s.json"
    demo_cmd._finish(object(), tmp_path, False, SUMMARY, str(out))  # done: returns
    assert '"steps_redone_without_notice": 1' in out.read_text()
    with pytest.raises(typer.Exit) as exc:
        demo_cmd._finish(object(), tmp_path, False, SUMMARY | {"failures": ["m: 2 steps redone"]}, None)
    assert exc.value.exit_code == 1
    with pytest.raises(typer.Exit):  # a storm that never finished
        demo_cmd._finish(object(), tmp_path, False, {"finished": False, "leaked_vms": 0, "failures": []}, None)


@pytest.mark.parametrize("other", ["--data", "--ha"])
def test_storm_runs_alone(monkeypatch, other):
    from burstd.cli.app import app

    monkeypatch.setattr(demo_cmd.os, "geteuid", lambda: 0)
    r = CliRunner().invoke(app, ["demo", "--storm", other])
    assert r.exit_code == 2 and "--storm runs one daemon" in r.output, r.output


def test_the_storm_bed_has_spare_cloud_nodes_and_short_requeue_holds(monkeypatch):
    """Four busy nodes and two spare, as a real pool (a notice powers a spare up: the requeued job starts on a
    node that is up), and cred_expire 10 s; the admin's own settings win."""
    from burstd.cli.demo_cmd import _bed

    for var in ("BURSTD_BED_CLOUD_NODES", "BURSTD_BED_CRED_EXPIRE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in (("BURSTD_BED_NAME", "stormunit"), ("BURSTD_BED_SLOT", "77")):  # _bed's setdefault: undone
        monkeypatch.setenv(var, value)
    bed = _bed(storm=True)
    assert (bed.config.cloud_count, bed.config.cred_expire) == (6, 10)
    assert _bed().config.cloud_count == 4  # the other demos keep the bed's four
    monkeypatch.setenv("BURSTD_BED_CLOUD_NODES", "8")
    assert _bed(storm=True).config.cloud_count == 8
