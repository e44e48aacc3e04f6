"""``burstctl testbed up`` ends with what to type next: Slurm's environment, the daemon in the foreground against
the bed's config (no systemd needed), burstctl against it, and how to bring the bed down."""

from __future__ import annotations

from types import SimpleNamespace

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.cli.testbed_cmd import next_steps

BED = SimpleNamespace(name="try", conf_path="/var/lib/burstd-testbed/try/slurm.conf",
                      burstd_config="/var/lib/burstd-testbed/try/burstd.toml")


def _commands(lines: list[str]) -> list[str]:
    return [line.split("#")[0].strip() for line in lines[1:]]


def test_next_steps_start_the_daemon_in_the_foreground_and_point_burstctl_at_it():
    cmds = _commands(next_steps(BED, "burstd"))
    assert cmds == ["export SLURM_CONF=/var/lib/burstd-testbed/try/slurm.conf",
                    "burstd --config /var/lib/burstd-testbed/try/burstd.toml --foreground",
                    "burstctl status -c /var/lib/burstd-testbed/try/burstd.toml",
                    "burstctl testbed down --name try"]


def test_a_bed_with_stub_hooks_is_told_to_switch_them_first():
    assert "burstctl testbed hooks burstd --name try" in _commands(next_steps(BED, "stub"))


def test_every_printed_burstctl_command_parses():
    import shlex

    for cmd in _commands(next_steps(BED, "stub")):
        if cmd.startswith("burstctl "):
            words = shlex.split(cmd)[1:]
            r = CliRunner().invoke(app, [*words, "--help"])
            assert r.exit_code == 0, (cmd, r.output)


def test_the_printed_daemon_command_is_the_installed_entry_point():
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["burstd"] == "burstd.daemon.main:main"  # what testbed/daemon_process.py starts
    assert _commands(next_steps(BED, "burstd"))[1].split() == [
        "burstd", "--config", "/var/lib/burstd-testbed/try/burstd.toml", "--foreground"]
