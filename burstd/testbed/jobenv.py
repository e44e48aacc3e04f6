"""The bed's job environment: this project's Python, runnable by the job user.

    env = ensure_job_env(bed.state_dir / "jobenv")     # idempotent; cheap once built
    sbatch --export=ALL,PYTHON=env.python,TORCHRUN=env.torchrun ...

Jobs run as an unprivileged user (``burstuser``), but the project's venv is usually built by root from
whatever ``python3`` root has, and that is often private: a pyenv under ``/root`` (mode 700), as on the CI
machine. The venv's ``bin/python`` is only a symlink into it, so every job would fail with exit 126
("Permission denied") after its VMs were up and billed. So the bed builds its own small environment:

* a copy of the base interpreter (the executable, its shared library if any, and the standard library
  without site-packages) in a world-readable folder, when the job user cannot reach the original;
* a venv made from that interpreter whose site-packages only *points at* the project venv's
  site-packages (a ``.pth`` line calling ``site.addsitedir``, so editable installs keep working), so torch
  and burstd are not copied;
* ``bin/torchrun``, a two-line launcher of ``burstd.train.launch`` (torchrun, quiet about a preemption) on
  that interpreter.

What a site must provide is the same thing (docs/researchers.md): the same interpreter and the same
packages on the head node and on every cloud node, at paths the job user can read and execute.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JobEnv:
    root: Path
    python: Path
    torchrun: Path


def reachable_by_others(path: Path) -> bool:
    """Every folder on the way to ``path`` is searchable by "other", and ``path`` itself readable by it; for a
    symlink, both the way to the link and the way to what it points at (a venv's ``bin/python`` in a private
    folder is out of reach even when it points at a public ``/usr/bin/python3``)."""
    path = Path(os.path.abspath(path))
    for _ in range(40):  # the kernel's own bound on a chain of links
        if any(not os.stat(parent).st_mode & stat.S_IXOTH for parent in path.parents):
            return False
        if not path.is_symlink():
            return bool(os.stat(path).st_mode & stat.S_IROTH)
        path = Path(os.path.abspath(path.parent / os.readlink(path)))
    return False


def _base_interpreter() -> tuple[Path, Path]:
    """(base prefix, real executable) of the interpreter behind ``sys.executable`` (through any venv)."""
    exe = Path(os.path.realpath(sys.executable))
    return Path(sys.base_prefix), exe


def _copy_interpreter(dest: Path) -> Path:
    """Copy the base interpreter (no site-packages) to ``dest``; returns the copied executable."""
    prefix, exe = _base_interpreter()
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    target = dest / "bin" / ver
    shutil.copy2(exe, target)
    libdir = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    (dest / "lib").mkdir(exist_ok=True)
    if ldlib.endswith(".so") or ".so." in ldlib:  # a shared-library build: the executable needs it
        for lib in libdir.glob(ldlib.split(".so")[0] + ".so*"):
            shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=True)
    shutil.copytree(prefix / "lib" / ver, dest / "lib" / ver, symlinks=True, dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if n in ("site-packages", "__pycache__", "test",
                                                                       "idlelib", "tkinter", "ensurepip")
                                             or n.startswith("config-")])
    return target


def _open_up(root: Path) -> None:
    """World-readable (and, where executable for the owner, executable) files and folders under ``root``."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o755)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            mode = os.stat(p).st_mode
            os.chmod(p, mode | 0o444 | (0o111 if mode & stat.S_IXUSR else 0))


def ensure_job_env(root: Path, *, project_site_packages: Path | None = None) -> JobEnv:
    """Build (once) the job environment in ``root`` and return its paths. Idempotent: an environment whose
    ``python`` runs is kept as it is."""
    root = Path(root)
    venv = root / "venv"
    python = venv / "bin" / "python"
    torchrun = venv / "bin" / "torchrun"
    launcher = f"#!{python}\nimport sys\nfrom burstd.train.launch import main\n\nsys.exit(main())\n"
    if python.exists() and torchrun.exists() and (root / ".complete").exists():
        if torchrun.read_text() != launcher:  # an environment built by an older burstd: refresh the launcher
            torchrun.write_text(launcher)
            torchrun.chmod(0o755)
        return JobEnv(root, python, torchrun)
    site_packages = project_site_packages or Path(sysconfig.get_paths()["purelib"])
    root.mkdir(parents=True, exist_ok=True)
    _, exe = _base_interpreter()
    base = exe if reachable_by_others(exe) else _copy_interpreter(root / "python")
    env = dict(os.environ)
    if base != exe and (root / "python" / "lib").exists():
        env["LD_LIBRARY_PATH"] = str(root / "python" / "lib")
    subprocess.run([str(base), "-m", "venv", "--without-pip", "--clear", str(venv)], check=True, env=env,
                   capture_output=True, text=True)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / ver / "site-packages" / "burstd-project.pth").write_text(
        f"import site; site.addsitedir({str(site_packages)!r})\n")
    # torchrun as burstd.train.launch: torchrun itself, minus its failure report for a preemption's planned exit
    torchrun.write_text(launcher)
    torchrun.chmod(0o755)
    if base != exe and (root / "python" / "lib").exists():
        # the copied interpreter finds its shared library through RPATH-less lookup: say where it is
        _wrap_with_library_path(venv, root / "python" / "lib")
    _open_up(root)
    (root / ".complete").write_text("ok\n")
    return JobEnv(root, python, torchrun)


def _wrap_with_library_path(venv: Path, libdir: Path) -> None:
    """Only for a shared-library interpreter build that is not on the loader's path: ``bin/python`` becomes a
    tiny shell launcher that sets ``LD_LIBRARY_PATH`` (sys.executable stays the venv's python)."""
    libs = list(libdir.glob("libpython*.so*"))
    if not libs:
        return
    bin_dir = venv / "bin"
    real = bin_dir / "python-real"
    target = Path(os.path.realpath(bin_dir / "python"))
    for name in ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        p = bin_dir / name
        if p.is_symlink() or p.exists():
            p.unlink()
    real.symlink_to(target)
    launcher = f'#!/bin/sh\nLD_LIBRARY_PATH={libdir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} exec {real} "$@"\n'
    for name in ("python", "python3"):
        (bin_dir / name).write_text(launcher)
        (bin_dir / name).chmod(0o755)
