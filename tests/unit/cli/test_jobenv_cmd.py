"""``burstctl job-env DIR``: the job environment of docs/researchers.md, from the command line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from burstd.cli.app import app

REPO = Path(__file__).resolve().parents[3]


def test_job_env_builds_a_runnable_environment_and_prints_the_sbatch_exports(tmp_path):
    folder = tmp_path / "jobenv"
    out = CliRunner().invoke(app, ["job-env", str(folder)])
    assert out.exit_code == 0, out.output
    python, torchrun = folder / "venv" / "bin" / "python", folder / "venv" / "bin" / "torchrun"
    lines = out.output.splitlines()
    assert lines[:3] == [f"PYTHON={python}", f"TORCHRUN={torchrun}",
                         f"sbatch --export=ALL,PYTHON={python},TORCHRUN={torchrun} TEMPLATE.sbatch"]
    # pytest's tmp folders are private (mode 700): the command says job users could not run it
    assert "not reachable by other users" in out.output

    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([str(torchrun), "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and "--nproc-per-node" in run.stdout, run.stderr
    assert "burstd.train.launch" in torchrun.read_text()  # torchrun, quiet about a preemption

    torchrun.write_text("#!/bin/sh\n# an older burstd's launcher of plain torchrun\n")
    again = CliRunner().invoke(app, ["job-env", str(folder), "--json"])  # idempotent; refreshes the launcher
    assert again.exit_code == 0
    assert "burstd.train.launch" in torchrun.read_text() and os.access(torchrun, os.X_OK)
    assert json.loads(again.output) == {"root": str(folder), "python": str(python), "torchrun": str(torchrun),
                                        "reachable_by_job_users": False}


def test_job_env_refuses_a_missing_site_packages_folder(tmp_path):
    out = CliRunner().invoke(app, ["job-env", str(tmp_path / "e"), "--site-packages", str(tmp_path / "nope")])
    assert out.exit_code != 0 and "--site-packages" in out.output and "not a folder" in out.output
    assert not (tmp_path / "e").exists()
