"""Processes the tests and benches start on this machine: a free port to give them, and a whole tree to kill.

    port = free_port()
    kill_tree(proc)          # torchrun and its workers, as a VM that vanishes takes them: SIGKILL, no goodbye
    procs = start_local_nodes(launch, train, logs, env=env, cwd=repo)   # a multi-node job's agents, one a log
    wait_for_step(logs[1], procs, 15)                                    # until that node's ranks print step 15

torchrun's workers run in sessions of their own, so a process group kill misses them: the tree is walked in /proc.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
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


def start_local_nodes(launch: Sequence[str], train: Sequence[str], logs: Sequence[Path], *, env: Mapping[str, str],
                      cwd: Path, nproc: int = 2, append: bool = False) -> list[subprocess.Popen]:
    """A multi-node torchrun job on this machine: one agent (``launch``: torchrun or ``burstd.train.launch``) a
    log in ``logs``, each with ``nproc`` workers, a static rendezvous on a free local port; ``train`` follows the
    node options (more launcher options, then the training module and its arguments). Each agent gets a session
    of its own, so a node can be killed alone (``kill_tree``). ``append``: a resumed run adds to the logs."""
    port = free_port()
    procs = []
    for node, log in enumerate(logs):
        cmd = [*launch, f"--nnodes={len(logs)}", f"--node-rank={node}", f"--nproc-per-node={nproc}",
               "--master-addr=127.0.0.1", f"--master-port={port}", "--max-restarts=0", *train]
        with log.open("a" if append else "w") as out:  # the agent keeps its own copy of the descriptor
            procs.append(subprocess.Popen(cmd, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    return procs


def wait_for_step(log: Path, procs: Sequence[subprocess.Popen], step: int, timeout_s: float = 300) -> None:
    """Until a rank writing to ``log`` prints ``step=<step>`` (``burstd.train.example``'s line); SystemExit with
    the log's tail if an agent ends or ``timeout_s`` passes first."""
    deadline = time.time() + timeout_s
    while not re.search(rf"rank=\d step={step} ", log.read_text()):
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit(f"training did not reach step {step}:\n{log.read_text()[-2000:]}")
        time.sleep(0.02)
