"""The machine under the beds: installed software, users, the shared munge, and process helpers.

Shared by every bed on the machine; nothing here belongs to one bed (see ``bed.py``).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from burstd.providers.local import netns
from burstd.testbed.config import STATE_ROOT

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-deps.sh"
TEST_USERS = ("burstuser", "burstuser2")  # a normal user, and a second uid for permission tests
REQUIRED_BINARIES = ("slurmctld", "slurmd", "slurmrestd", "slurmdbd", "sacctmgr", "scontrol", "sbatch", "sinfo",
                     "squeue", "munged", "mariadbd", "mariadb-install-db", "nsenter", "unshare", "ip", "nft")


class BedError(RuntimeError):
    """The bed cannot be brought up or down; the message says what to do."""




def missing_software() -> list[str]:
    missing = [b for b in REQUIRED_BINARIES if shutil.which(b, path=netns.SANE_PATH) is None]
    if not glob.glob("/usr/lib/*/slurm-wlm/auth_jwt.so") and not glob.glob("/usr/lib/slurm-wlm/auth_jwt.so"):
        missing.append("auth_jwt.so (slurm-wlm-jwt-plugin)")
    return missing


def ensure_installed(install: bool = True) -> None:
    missing = missing_software()
    if not missing:
        return
    if install and INSTALL_SCRIPT.is_file():
        subprocess.run(["bash", str(INSTALL_SCRIPT)], check=True, env={"PATH": netns.SANE_PATH, "LANG": "C"})
        missing = missing_software()
        if not missing:
            return
    raise BedError(f"missing: {', '.join(missing)}. As root on Debian 12 run: bash {INSTALL_SCRIPT}")


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def ensure_users(rest_user: str) -> None:
    """slurmrestd's unprivileged user and the test users (the install script makes them too)."""
    if not _user_exists(rest_user):
        _sh(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", rest_user],
            f"create user {rest_user}")
    for user in TEST_USERS:
        if not _user_exists(user):
            _sh(["useradd", "--create-home", "--shell", "/bin/bash", user], f"create user {user}")


def munge_ok() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=5, env={"PATH": netns.SANE_PATH})
        if enc.returncode != 0:
            return False
        dec = subprocess.run(["unmunge"], input=enc.stdout, capture_output=True, timeout=5,
                             env={"PATH": netns.SANE_PATH})
        return dec.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_munge() -> None:
    """munge is shared by every bed: start it if it is not running, never stop it.

    Beds come up in parallel (xdist workers, the release subsets beside the main run), so the start is serialised
    by a lock of its own, and a munged that another process started between our check and our start counts as
    started: munged refuses a second copy, and only an answering munged matters."""
    if munge_ok():
        return
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / ".munge.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if munge_ok():
            return
        if not Path("/etc/munge/munge.key").exists():
            _sh(["mungekey", "-c", "-k", "/etc/munge/munge.key"], "create munge key")
            _sh(["chown", "munge:munge", "/etc/munge/munge.key"], "chown munge key")
            os.chmod("/etc/munge/munge.key", 0o400)
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        started = _sh(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], "start munged", check=False)
        try:
            _wait(munge_ok, 10, "munged to answer")
        except BedError:
            output = (started.stderr or started.stdout).strip()
            raise BedError(f"start munged: `runuser -u munge -- /usr/sbin/munged` exited {started.returncode} "
                           f"and munge does not answer: {output}") from None


def _sh(argv: list[str], what: str, env: dict[str, str] | None = None, timeout: float = 60,
        check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=env or {"PATH": netns.SANE_PATH, "LANG": "C"})
    except subprocess.TimeoutExpired:
        raise BedError(f"{what}: `{' '.join(argv)}` timed out after {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        raise BedError(f"{what}: `{' '.join(argv)}` failed (exit {proc.returncode}): "
                       f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def _wait(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise BedError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _pid_of(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None, comm: str) -> bool:
    """Is ``pid`` a live process named ``comm`` (never trust a pid file alone: pids are reused)."""
    if not pid:
        return False
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != comm[:15]:
            return False
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


def _stop(pid: int | None, comm: str, timeout: float = 10) -> bool:
    if not _alive(pid, comm):
        return False
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid, comm):
        time.sleep(0.1)
    if _alive(pid, comm):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    try:  # reap it if we are its parent (slurmrestd started by this process)
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return True


def _port_free(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


@contextmanager
def _global_lock() -> Iterator[None]:
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def parse_kv(line: str) -> dict[str, str]:
    """``scontrol show ... -o`` output line -> {Key: value} (values may contain spaces)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(\S+?)=(.*?)(?=\s+\S+?=|\s*$)", line.strip())}


def other_beds() -> list[dict]:
    out = []
    for path in sorted(STATE_ROOT.glob("*/bed.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out
