"""Helpers shared by burstctl commands: the app style, config loading, API calls, JSON output, error exits.

Exit codes, the same in every command: 0 done; 1 the action failed (the daemon refused, a run went wrong);
2 bad input (an option, an id prefix, a config key: the message names it); 3 the daemon cannot be reached.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from burstd.config import Config, ConfigError, load_config
from burstd.domain.jobref import JobRef

console = Console()
err_console = Console(stderr=True)

#: Plain help text: "[default: ...]" in a help string is shown as written (rich markup would eat it) and
#: flags show no "<bool>" type.
HELP_STYLE: dict[str, Any] = {"rich_markup_mode": None, "no_args_is_help": True}

ConfigOption = typer.Option(None, "--config", "-c",
                            help="Config file [default: $BURSTD_CONFIG, else /etc/burstd/burstd.toml]")
JsonFlag = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
WideFlag = typer.Option(False, "--wide", help="Every column whole, however long the lines (at the terminal's "
                                              "width some are left out or shortened, and the table says which).")
WatchOption = typer.Option(None, "--watch", metavar="SECONDS", min=1,
                           help="Show it again every SECONDS until Ctrl-C (with --json: one JSON document a line).")


def sub_app(help_text: str) -> typer.Typer:
    """A command group (``burstctl budget ...``) in the house style."""
    return typer.Typer(help=help_text, **HELP_STYLE)


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


def api_call(config: str | None, fn: Callable[[Any], Any]) -> Any:
    """``fn(api)`` against the running daemon; exit 3 when it cannot be reached, 2 on a 4xx (bad input), else 1."""
    from burstd.daemon.client import ApiClient, ApiError

    cfg = get_config(config)
    try:
        with ApiClient.from_config(cfg) as api:
            return fn(api)
    except ApiError as exc:
        status = exc.status
        fail(str(exc), 3 if status is None else 2 if status in (404, 409, 422) else 1)


def print_json(data: Any, *, one_line: bool = False) -> None:
    sys.stdout.write(json.dumps(data, indent=None if one_line else 2, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


_sleep = time.sleep  # between --watch rounds (a test replaces it)


def show(read: Callable[[], Any], render: Callable[[Any], None], *, as_json: bool, watch: float | None = None) -> None:
    """What every read command does: ``read()`` the data, then print it as JSON or ``render`` it; with
    ``--watch SECONDS``, again every SECONDS until Ctrl-C (on a terminal the screen is redrawn; with --json one
    document a line, so ``jq`` can follow it)."""
    try:
        while True:
            data = read()
            if as_json:
                print_json(data, one_line=watch is not None)
            else:
                if watch is not None:
                    if console.is_terminal:
                        console.clear()
                    console.print(f"every {watch:g} s, Ctrl-C to stop: {time.strftime('%Y-%m-%d %H:%M:%S')}",
                                  style="dim", highlight=False)
                render(data)
            if watch is None:
                return
            _sleep(watch)
    except KeyboardInterrupt:
        return


def resolve_lease(config: str | None, prefix: str, unknown: str = "") -> dict:
    """The lease whose id (or instance id) is ``prefix`` or starts with it; exit 2 when none or several do
    (``unknown``: the message when none does)."""
    from burstd.domain.ids import IdError, unique_prefix

    rows = api_call(config, lambda api: api.get("/v1/leases", all=True))
    by_id = {r["lease_id"]: r for r in rows}
    by_instance = {r["instance_id"]: r for r in rows if r.get("instance_id")}
    try:
        return by_id[unique_prefix(prefix, by_id, "lease")]
    except IdError as lease_err:
        try:
            return by_instance[unique_prefix(prefix, by_instance, "instance")]
        except IdError:
            fail(unknown if unknown and "ambiguous" not in str(lease_err) else str(lease_err), 2)


def job_ref_arg(text: str) -> JobRef:
    """A job id typed on the command line, read as Slurm writes it (``int()`` would read 1234_5 as 12345);
    exit 2 naming it when it is not one."""
    from burstd.domain.jobref import JobRefError, parse_job_ref

    try:
        return parse_job_ref(text)
    except JobRefError as exc:
        fail(str(exc), 2)


def node_target(config: str | None, target: str) -> str:
    """A cloud node name as given, or the node of the lease / instance whose id starts with ``target``."""
    cfg = get_config(config)
    if cfg.pool_of_node(target) is not None:
        return target
    lease = resolve_lease(config, target, f"unknown node {target!r}: not a cloud node of any pool, and no lease "
                                           "or instance id starts with it")
    if lease["state"] in ("TERMINATED", "REFUSED", "FAILED"):
        fail(f"lease {lease['lease_id']} of node {lease['node_name']} is {lease['state']}: nothing to act on", 2)
    return lease["node_name"]

