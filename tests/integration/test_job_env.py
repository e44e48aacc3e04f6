"""The bed's job environment runs for the unprivileged job user, even when the project's venv was built
from a private interpreter (a pyenv under /root, mode 700, as on the CI machine).

Reproduced from scratch, whatever this machine's python3 is: a copy of the interpreter in a mode-700
folder, a venv made from it (the project's packages reached through a .pth), and from inside that venv the
job environment is built; the job user gets exit 126 from the private venv and runs torch and burstd from
the job environment.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from burstd.testbed.jobenv import _copy_interpreter, reachable_by_others

pytestmark = [pytest.mark.bed]
JOB_USER = "burstuser"


def _need_root_and_user():
    if os.geteuid() != 0:
        pytest.skip("needs root (runuser to the job user)")
    try:
        pwd.getpwnam(JOB_USER)
    except KeyError:
        pytest.skip(f"needs the bed's job user {JOB_USER} (scripts/install-deps.sh)")


def _as_job_user(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", JOB_USER, "--", *argv], capture_output=True, text=True, timeout=120,
                          cwd="/", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp"})


def test_job_env_from_a_private_interpreter_runs_torch_and_burstd_as_the_job_user(open_dir):
    _need_root_and_user()
    tmp_path = open_dir
    private = tmp_path / "root-home"  # like /root: mode 700
    private.mkdir(mode=0o700)
    exe = _copy_interpreter(private / "pyenv")
    libdir = private / "pyenv" / "lib"
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    venv = private / "venv"
    subprocess.run([str(exe), "-m", "venv", "--without-pip", str(venv)], check=True, env=env)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    purelib = sysconfig.get_paths()["purelib"]
    (venv / "lib" / ver / "site-packages" / "project.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    assert not reachable_by_others(venv / "bin" / "python")

    # the failure the job user gets from such a venv: exit 126 (or "Permission denied" from runuser)
    bad = _as_job_user(str(venv / "bin" / "python"), "-c", "pass")
    assert bad.returncode in (126, 1) and "Permission denied" in bad.stderr, bad

    jobenv = tmp_path / "jobenv"
    subprocess.run([str(venv / "bin" / "python"), "-c",
                    f"from pathlib import Path; from burstd.testbed.jobenv import ensure_job_env; "
                    f"ensure_job_env(Path({str(jobenv)!r}), project_site_packages=Path({purelib!r}))"],
                   check=True, env=env)
    ok = _as_job_user(str(jobenv / "venv" / "bin" / "python"), "-c",
                      "import torch, burstd.train; print('ok', torch.__version__)")
    assert ok.returncode == 0 and ok.stdout.startswith("ok "), ok
    tr = _as_job_user(str(jobenv / "venv" / "bin" / "torchrun"), "--help")
    assert tr.returncode == 0 and "--nproc-per-node" in tr.stdout, tr
    shutil.rmtree(private)  # the private interpreter is gone: the job environment does not depend on it
    again = _as_job_user(str(jobenv / "venv" / "bin" / "python"), "-c", "import burstd.train")
    assert again.returncode == 0, again
