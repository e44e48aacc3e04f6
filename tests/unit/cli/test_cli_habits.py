"""Issue 26: a CLI that fits an admin's habits: --version, shell completion, tables readable at 80 columns that
say what they cut (--wide shows all), --json on every read command, --watch where state changes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from burstd.cli import common
from burstd.cli.app import app, version
from burstd.cli.tables import Column, fit, print_table, short_ids

REPO = Path(__file__).resolve().parents[3]
ROOT = typer.main.get_command(app)


def test_version():
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output == f"burstctl (burstd) {version()}\n"
    import burstd

    assert version() == burstd.__version__  # the checkout and the package metadata agree


def test_shell_completion_is_offered_and_completes_commands_and_options(monkeypatch):
    # With shellingham installed, a bare --show-completion detects the shell from the process's ancestors, which a
    # pytest worker may not have (it failed so in one xdist run); Typer's own switch makes it take the shell named.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    r = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="burstctl")
    assert r.exit_code == 0 and "_BURSTCTL_COMPLETE=complete_bash" in r.output, r.output

    def complete(words: str, cword: int) -> list[str]:
        env = dict(os.environ, _BURSTCTL_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword),
                   PYTHONPATH=str(REPO))
        out = subprocess.run([sys.executable, "-c", "from burstd.cli.app import main; main()"], env=env,
                             capture_output=True, text=True, timeout=60)
        return out.stdout.split()

    assert complete("burstctl lea", 1) == ["leases"]
    assert complete("burstctl leases --w", 2) == ["--wide", "--watch"]


def _commands(cmd=ROOT, path=()):
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


#: every command that changes something, or writes files, rather than reading state
CHANGES = {"pause", "resume", "drain", "terminate", "budget set", "cloud unprotect", "testbed hooks", "slurm-conf",
           "image build"}


#: read commands whose only output is JSON already
JSON_ONLY = {"image fingerprint"}


def test_every_read_command_takes_the_one_shared_json_option():
    for name, cmd in _commands():
        if name in CHANGES or name in JSON_ONLY:
            continue
        [opt] = [p for p in cmd.params if "--json" in p.opts] or [None]
        assert opt is not None, f"burstctl {name} has no --json"
        if name != "demo":  # demo --json FILE writes its summary to a file
            assert opt.help == common.JsonFlag.help, f"burstctl {name}: its own --json, not common.JsonFlag"


def test_wide_and_watch_where_they_belong():
    opts = {name: {o for p in cmd.params for o in p.opts} for name, cmd in _commands()}
    for name in ("status", "nodes", "leases", "jobs"):
        assert {"--watch", "--wide", "--json"} <= opts[name], name
    for name in ("events", "simulate"):
        assert "--wide" in opts[name], name


LEASE_COLS = [Column("lease"), Column("node"), Column("pool", drop=2), Column("state"), Column("since"),
              Column("instance", drop=1), Column("jobs", free_text=True), Column("gang", drop=0),
              Column("reason", free_text=True)]
REASON = "spot-interruption deadline 1773144120 (notice from the agent on cloud1)"


def _rows(n=3):
    return [[f"3f2a{i:04d}", f"cloud{i}", "aws-spot", "DRAINING", "12m ago", "i-0123456789abcdef0", "4242,4243",
             "3f2a0000", REASON] for i in range(n)]


def test_at_80_columns_rows_stay_one_line_and_the_table_says_what_it_cut():
    out = Console(width=80, record=True, file=io.StringIO())
    print_table(out, "leases", LEASE_COLS, _rows(), wide=False, note="lease ids: unique prefixes")
    text = out.export_text()
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= 80
    assert sum("cloud" in x and "DRAINING" in x for x in lines) == 3  # one line a lease, no folded strips
    assert "4242,4243" in text and "3f2a0001" in text and "spot-interruption" in text
    assert "i-0123456789abcdef0" not in text
    said = " ".join(lines[-3:])
    assert "pool, instance, gang not shown" in said and "reason shortened" in said and "--wide shows all" in said


def test_cells_are_plain_text_not_markup():
    out = Console(width=80, record=True, file=io.StringIO())
    rows = _rows(1)
    rows[0][-1] = "[red]disk[/red] errors"
    print_table(out, "leases", LEASE_COLS, rows, wide=False)
    assert "[red]disk[/red] errors" in out.export_text()


def test_wide_shows_every_column_whole():
    out = Console(width=80, record=True, file=io.StringIO())
    print_table(out, "leases", LEASE_COLS, _rows(), wide=True)
    text = out.export_text()
    assert REASON in text and "i-0123456789abcdef0" in text and "not shown" not in text
    assert sum(REASON in line for line in text.splitlines()) == 3  # each row whole, on its own line


def test_a_table_that_fits_cuts_nothing_and_says_nothing():
    widths, shortened = fit(LEASE_COLS, _rows(), 400)
    assert len(widths) == len(LEASE_COLS) and shortened == []


def test_short_ids_are_unique_prefixes():
    ids = ["3f2a" + "0" * 28, "3f2a0000" + "1" * 24, "abcdef" + "2" * 26]
    short = short_ids(ids)
    assert short[ids[2]] == "abcdef22" and short[ids[0]] == "3f2a0000" + "0" and short[ids[1]] == "3f2a00001"
    assert all(sum(i.startswith(s) for i in ids) == 1 for s in short.values())


def test_watch_reads_again_until_ctrl_c(monkeypatch, capsys):
    rounds = iter(range(100))
    naps = []

    def nap(seconds):
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(common, "_sleep", nap)
    common.show(lambda: {"round": next(rounds)}, lambda d: None, as_json=True, watch=2)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == [{"round": 0}, {"round": 1}, {"round": 2}] and naps == [2, 2, 2]
    common.show(lambda: {"round": 9}, lambda d: None, as_json=True)  # no --watch: once, indented
    assert json.loads(capsys.readouterr().out) == {"round": 9}


@pytest.mark.parametrize("args", [["status"], ["nodes"], ["leases"], ["jobs"], ["jobs", "--training"]])
def test_watch_on_a_live_daemon(tmp_path, monkeypatch, args):
    from tests.integration.live_api import live_api

    naps = []

    def nap(seconds):
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(common, "_sleep", nap)
    with live_api(tmp_path) as (path, rec, store, *_):
        store.create_lease(pool="local", node_name="cloud1", lease_id="3f2a" + "0" * 28, reason="test")
        rec.cycle()
        r = CliRunner().invoke(app, [*args, "--watch", "5", "--json", "-c", path])
        assert r.exit_code == 0, r.output
        docs = [json.loads(x) for x in r.stdout.splitlines()]
        assert len(docs) == 2 and naps == [5, 5]
        r = CliRunner().invoke(app, [*args, "--watch", "0", "-c", path])
        assert r.exit_code == 2  # a zero interval would spin


def test_simulate_at_80_columns_keeps_cost_and_jct_and_says_what_it_left_out(tmp_path, monkeypatch):
    from tests.unit.simulate.test_simulate_cli import SWF, calm_spot_traces

    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    args = ["simulate", "--trace", str(trace), "--policy", "never,ondemand-all", "--limit-jobs", "20",
            "--spot-traces", str(calm_spot_traces(tmp_path / "spot"))]
    monkeypatch.setattr(common.console, "_width", 80)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    table = r.output[:r.output.index("wait = to the final start")]
    assert max(len(x) for x in table.splitlines()) <= 80, table
    assert sum(x.startswith("│ never ") or x.startswith("│ ondemand-all ") for x in table.splitlines()) == 2
    for kept in ("cloud", "ondemand", "never"):
        assert kept in table
    assert "cost by market" in table and "not shown (--wide shows all)" in table
    wide = CliRunner().invoke(app, [*args, "--wide"]).output
    assert "bounded slowdown mean" in wide and "not shown" not in wide
