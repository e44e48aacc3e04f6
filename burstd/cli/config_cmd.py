"""``burstctl config check [FILE]``: validate a config and print the effective settings."""

from __future__ import annotations

import typer

from burstd.cli.common import JsonFlag, console, get_config, print_json, sub_app
from burstd.config import config_path


def register(app: typer.Typer) -> None:
    config_app = sub_app("Check and show the burstd configuration.")
    app.add_typer(config_app, name="config")

    @config_app.command("check")
    def check(
        file: str = typer.Argument(None, help="Config file [default: $BURSTD_CONFIG or /etc/burstd/burstd.toml]"),
        as_json: bool = JsonFlag,
        file_only: bool = typer.Option(
            False, "--file-only", help="Check the file alone, not what it names on this host (groups, socket, "
                                       "state dir, secrets): for a config written for another machine."),
    ) -> None:
        """Validate FILE as the daemon does at start; print every problem (file: key.path: reason) or the
        effective config."""
        cfg = get_config(file, host=not file_only)  # the very validation the daemon runs at start
        if as_json:
            print_json(cfg.model_dump(mode="json"))
            return
        console.print(f"[green]ok[/]: {config_path(file)}")
        console.print_json(data=cfg.model_dump(mode="json"))
