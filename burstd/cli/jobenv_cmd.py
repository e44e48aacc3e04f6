"""``burstctl job-env DIR``: build the job environment the sbatch templates run (burstd/testbed/jobenv.py).

    burstctl job-env /opt/burstd-jobenv
    PYTHON=/opt/burstd-jobenv/venv/bin/python
    TORCHRUN=/opt/burstd-jobenv/venv/bin/torchrun
    sbatch --export=ALL,PYTHON=/opt/burstd-jobenv/venv/bin/python,TORCHRUN=/opt/burstd-jobenv/venv/bin/torchrun ...

The same environment ``Bed.job_env()`` builds for the test bed: this interpreter (copied when the job user could
not reach it) and a venv whose packages are this burstd's, readable and runnable by every user. Idempotent.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer

from burstd.cli.common import JsonFlag, fail, print_json


def register(app: typer.Typer) -> None:
    @app.command("job-env")
    def job_env_cmd(
        folder: Path = typer.Argument(..., help="where to build it: a folder every job user can reach "
                                                "(e.g. /opt/burstd-jobenv on shared storage)"),
        site_packages: Path = typer.Option(None, "--site-packages",
                                           help="the packages to point at [default: this burstd's]"),
        as_json: bool = JsonFlag,
    ) -> None:
        """Build the Python environment the sbatch templates run (PYTHON, TORCHRUN), runnable by job users."""
        from burstd.testbed.jobenv import ensure_job_env, reachable_by_others

        if site_packages is not None and not site_packages.is_dir():
            fail(f"--site-packages {site_packages}: not a folder")
        try:
            env = ensure_job_env(folder.resolve(), project_site_packages=site_packages)
        except (OSError, subprocess.CalledProcessError) as exc:
            fail(f"could not build the job environment in {folder}: {exc}")
        shared = reachable_by_others(env.python)
        if as_json:
            print_json({"root": str(env.root), "python": str(env.python), "torchrun": str(env.torchrun),
                        "reachable_by_job_users": shared})
            return
        print(f"PYTHON={env.python}")
        print(f"TORCHRUN={env.torchrun}")
        print(f"sbatch --export=ALL,PYTHON={env.python},TORCHRUN={env.torchrun} TEMPLATE.sbatch")
        if not shared:
            print(f"warning: {env.python} is not reachable by other users (a folder on its way is private): "
                  "jobs would fail with exit 126; build it under a world-readable folder")
