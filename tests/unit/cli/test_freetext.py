"""Free text in burstctl's tables is shown escaped, never raw (issue 21 item 5): an account string from sacct
cannot draw a forged row, clear the terminal or recolour the table."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli import common, spend_cmd
from burstd.cli.app import app
from burstd.cli.freetext import cell, shown

HOSTILE = "chem\x1b[2J\x1b]0;owned\x07\n| 999 | forged row |\u202e[red]x[/]"


@pytest.mark.parametrize("text,want", [
    ("physics", "physics"),
    ("é-漢 it's", "é-漢 it's"),  # printable text stays readable
    ("a\nb\r\tc", "a\\nb\\r\\tc"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("\u202eevil", "\\u202eevil"),  # a bidi override
    ("x\\ny", "x\\\\ny"),  # a backslash doubles: an escape cannot be faked
    (None, ""),
])
def test_shown_escapes_what_a_terminal_would_act_on(text, want):
    assert shown(text) == want


def test_a_cell_is_never_read_as_markup():
    assert cell("[red]x[/]").plain == "[red]x[/]"


def _run(monkeypatch, answer, *args):
    monkeypatch.setattr(spend_cmd, "api_call", lambda config, fn: answer)
    # wide enough for the whole row on one line, whatever terminal (or COLUMNS) the suite runs under
    monkeypatch.setattr(common.console, "_width", 250)
    return CliRunner().invoke(app, list(args))


def _assert_escaped(output):
    assert "\x1b" not in output and "\u202e" not in output and "\x07" not in output
    assert "forged row" in output  # the text is there, escaped, on the same line as the account
    line = next(x for x in output.splitlines() if "forged row" in x)
    assert "chem\\x1b[2J" in line and "\\n| 999 |" in line and "[red]x[/]" in line


def test_spend_reconcile_shows_sacct_accounts_escaped(monkeypatch):
    data = {"ok": False, "agree": [], "agreed_micro_usd": 0, "overhead_micro_usd": 0, "only_burstd": {},
            "only_sacct": [], "other_nodes": {}, "other_account": {"12": {"burstd": "physics", "sacct": HOSTILE}},
            "unmatched_micro_usd": 0, "instances": None}
    r = _run(monkeypatch, data, "spend", "--reconcile")
    assert r.exit_code == 1
    _assert_escaped(r.output)
    r = _run(monkeypatch, data, "spend", "--reconcile", "--json")
    assert json.loads(r.output)["other_account"]["12"]["sacct"] == HOSTILE  # --json carries it unchanged


def test_spend_and_budget_tables_show_accounts_escaped(monkeypatch):
    spend = {"rows": [{"key": HOSTILE, "spend_micro_usd": 1_000_000}], "total_micro_usd": 1_000_000}
    _assert_escaped(_run(monkeypatch, spend, "spend", "--by", "account").output)
    book = {"period": "month", "accounts": {HOSTILE: {"limit_micro_usd": 5, "spent_micro_usd": 1, "source": "set"}},
            "site": {}, "default_account_micro_usd": None}
    _assert_escaped(_run(monkeypatch, book, "budget", "show").output)
