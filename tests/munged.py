"""A private munged for tests: its own key and socket, so real MUNGE credentials are made and checked.

    with private_munged(tmp) as m:
        cred = m.encode(b'{"job": 5}', uid=65534)     # as root: a credential for any uid
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass
class Munged:
    socket: str

    def encode(self, payload: bytes, *, uid: int | None = None, gid: int | None = None) -> str:
        argv = ["munge", f"--socket={self.socket}"]
        if uid is not None:
            argv.append(f"--uid={uid}")
        if gid is not None:
            argv.append(f"--gid={gid}")
        return subprocess.run(argv, input=payload, capture_output=True, check=True, timeout=10).stdout.decode().strip()


@contextmanager
def private_munged() -> Iterator[Munged]:
    if not shutil.which("munged") and not os.path.exists("/usr/sbin/munged"):
        pytest.skip("munged is not installed")
    if os.geteuid() != 0:
        pytest.skip("a credential for another uid needs root")
    d = tempfile.mkdtemp(prefix="burstd-munge-")
    os.chmod(d, 0o755)  # munged wants its socket reachable by all (it checks the peer itself)
    key = os.path.join(d, "key")
    with open(key, "wb") as fh:
        fh.write(os.urandom(1024))
    os.chmod(key, 0o600)
    sock = os.path.join(d, "sock")
    munged = shutil.which("munged") or "/usr/sbin/munged"
    subprocess.run([munged, "--force", f"--socket={sock}", f"--key-file={key}", f"--log-file={d}/log",
                    f"--pid-file={d}/pid", f"--seed-file={d}/seed"], check=True, timeout=30)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        yield Munged(sock)
    finally:
        subprocess.run([munged, "--stop", f"--socket={sock}"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(d, ignore_errors=True)
