"""The agent's tests run its real /proc scan, but never let it see another test's processes."""

from __future__ import annotations

import os

import pytest

from burstd.agent import actions


@pytest.fixture(autouse=True)
def _agent_sees_only_this_workers_processes(monkeypatch):
    """A preemption notice makes the agent signal every preemptible job it finds in its network namespace. On
    the suite's machine that namespace is the host's, where other xdist workers train too: a notice in
    test_agent_main.py once preempted test_train_torchrun.py's resumed template run on another worker with a
    stray SIGUSR1. Here the real scan keeps only this worker's own descendants (docs/testbed.md, round ten)."""
    real = actions.scan_processes

    def own(proc_root: str = "/proc", *, same_netns: bool = True) -> list[actions.Proc]:
        procs = real(proc_root, same_netns=same_netns)
        parent = {p.pid: p.ppid for p in procs}
        me = os.getpid()

        def mine(pid: int) -> bool:
            for _ in range(64):  # a process tree is never this deep; a loop in a racy read ends here
                pid = parent.get(pid, 0)
                if pid == me:
                    return True
                if pid <= 1:
                    return False
            return False

        return [p for p in procs if mine(p.pid)]

    monkeypatch.setattr(actions, "scan_processes", own)
