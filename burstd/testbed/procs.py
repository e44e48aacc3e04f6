"""Processes the tests and benches start on this machine: a free port to give them, and a whole tree to kill.

    port = free_port()
    kill_tree(proc)          # torchrun and its workers, as a VM that vanishes takes them: SIGKILL, no goodbye

torchrun's workers run in sessions of their own, so a process group kill misses them: the tree is walked in /proc.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the caller binds it soon; a race only with another picker)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry.name))
    return kids


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents before their children."""
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def kill_tree(proc: subprocess.Popen, *, settle_s: float = 30) -> None:
    """SIGKILL ``proc`` and every process below it at once, reap ``proc``, and wait (up to ``settle_s``) until the
    others are gone too, so their ports and files are free for what runs next."""
    below = descendants(proc.pid)
    for pid in [proc.pid, *below]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline and any(map(running, below)):
        time.sleep(0.05)


def running(pid: int) -> bool:
    """``pid`` still runs: it exists and is no zombie (a zombie holds no port or file, only its exit status)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
