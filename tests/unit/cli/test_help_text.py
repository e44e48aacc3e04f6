"""``burstctl ... --help`` reads well for every command: flags carry no ``<bool>`` type, a default written in a
help string survives (rich markup used to eat "[default: ...]" and leave "Bed name ."), and ``--since`` means
the same thing, in the same words, wherever it appears."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.cli.timespec import SINCE_HELP


def _commands() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    out: list[tuple[str, ...]] = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        out.append(path)
        if hasattr(cmd, "commands"):  # a group
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))

    walk(root, ())
    return out


COMMANDS = _commands()


def _help(path: tuple[str, ...]) -> str:
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    return r.output


def test_every_command_is_walked():
    assert ("spend",) in COMMANDS and ("budget", "set") in COMMANDS and ("testbed", "up") in COMMANDS
    assert ("spend-plot",) not in COMMANDS  # one spend command: `burstctl spend --plot`


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "burstctl")
def test_help_has_no_bool_metavar_and_no_eaten_default(path):
    text = _help(path)
    assert "<bool>" not in text
    assert not re.search(r"\w \.$", text, re.M), text  # "Bed name ." : a default eaten by markup


def test_defaults_are_shown():
    assert "[default: $BURSTD_BED_NAME, else burstd]" in _help(("testbed", "up"))
    assert "[default: the pool's local.notice_s, 120 unless set]" in " ".join(_help(("preempt",)).split())
    assert "[default: account]" in _help(("spend",))


def test_since_has_one_wording_everywhere():
    with_since = []
    for path in COMMANDS:
        cmd = typer.main.get_command(app)
        for name in path:
            cmd = cmd.commands[name]
        for p in cmd.params:
            if "--since" in getattr(p, "opts", ()):
                with_since.append(path)
                assert p.help.startswith(SINCE_HELP), (path, p.help)
    assert ("spend",) in with_since
