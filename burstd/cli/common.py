"""Helpers shared by burstctl commands: config loading, JSON output, error exits."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from burstd.config import Config, ConfigError, load_config

console = Console()
err_console = Console(stderr=True)

ConfigOption = typer.Option(None, "--config", "-c", help="Config file [env: BURSTD_CONFIG; default /etc/burstd/burstd.toml]")
JsonFlag = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


def fail(message: str, code: int = 1) -> NoReturn:
    # One line per error, never wrapped at the terminal width (scripts grep it); the message is escaped so a
    # hostlist such as cloud[1-3] is not read as rich markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def get_config(path: str | None, *, host: bool = False) -> Config:
    """The config; ``host=True`` also checks what it names on this machine (groups, paths, secrets)."""
    try:
        if host:
            from burstd.config_host import load_checked_config

            return load_checked_config(path)
        return load_config(path)
    except ConfigError as exc:
        sys.stderr.write(f"{exc}\n")  # one unwrapped line per problem: easy to grep
        raise typer.Exit(2) from None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str, sort_keys=False) + "\n")
