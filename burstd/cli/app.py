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
    "burstd.cli.demo_cmd",
    "burstd.cli.preempt_cmd",
    "burstd.cli.policy_cmd",
    "burstd.cli.spend_cmd",
    "burstd.cli.image_cmd",
]

app = typer.Typer(
    name="burstctl",
    help="Drive burstd: see the queue pressure, leases, budgets and spend; steer bursting.",
    pretty_exceptions_enable=False,
    add_completion=False,
    **HELP_STYLE,
)

for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
