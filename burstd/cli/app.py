"""The ``burstctl`` entry point: wires each topic's commands into one Typer app.

Each module in ``COMMAND_MODULES`` defines ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib

import typer

from burstd.cli.common import HELP_STYLE

COMMAND_MODULES = [
    "burstd.cli.config_cmd",
    "burstd.cli.cloud_cmd",
    "burstd.cli.testbed_cmd",
    "burstd.cli.snapshot_cmd",
    "burstd.cli.ops_cmd",
    "burstd.cli.jobs_cmd",
    "burstd.cli.demo_cmd",
    "burstd.cli.preempt_cmd",
    "burstd.cli.policy_cmd",
    "burstd.cli.spend_cmd",
    "burstd.cli.jobenv_cmd",
    "burstd.cli.image_cmd",
    "burstd.cli.doctor_cmd",
    "burstd.cli.data_cmd",
]

app = typer.Typer(
    name="burstctl",
    help="Drive burstd: see the queue pressure, leases, budgets and spend; steer bursting.",
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish (docs/admin-guide.md)
    **HELP_STYLE,
)


def version() -> str:
    """burstd's version as installed (the package metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("burstd")
    except PackageNotFoundError:
        import burstd

        return burstd.__version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"burstctl (burstd) {version()}")
        raise typer.Exit()


@app.callback()
def _root(_version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                        help="Print burstd's version and exit.")) -> None:
    """Drive burstd: see the queue pressure, leases, budgets and spend; steer bursting."""

for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def main() -> None:
    app(prog_name="burstctl")  # also under python -m: completion scripts and --version name burstctl


if __name__ == "__main__":
    main()
