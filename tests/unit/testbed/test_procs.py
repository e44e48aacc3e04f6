"""burstd.testbed.procs: a whole process tree killed at once (torchrun's workers sit in sessions of their own)."""

from __future__ import annotations

import os
import socket
import subprocess
import time

from burstd.testbed.procs import descendants, free_port, kill_tree, running


def test_kill_tree_kills_the_children_and_grandchildren_of_a_process_in_their_own_sessions():
    # sh -> [sh (setsid: a session of its own, as torchrun's workers have) -> sleep], sleep
    proc = subprocess.Popen(["sh", "-c", "setsid sh -c 'sleep 300 & wait' & sleep 300 & wait"])
    deadline = time.monotonic() + 10
    while len(descendants(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    below = descendants(proc.pid)
    assert len(below) == 3, below
    assert len({os.getsid(pid) for pid in [proc.pid, *below]}) == 2  # a process group kill would miss some
    kill_tree(proc, settle_s=10)
    assert proc.returncode is not None
    alive = [pid for pid in below if running(pid)]
    assert alive == []


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
