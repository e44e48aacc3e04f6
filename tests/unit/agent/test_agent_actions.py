"""The agent's actions: which processes get the signal, drain with the deadline, once per notice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from burstd.agent.actions import NoticeHandler, Proc, find_targets, scan_processes, select_targets
from burstd.domain.preemption import Notice, parse_preemption_reason


def P(pid, ppid, comm, job="7", rank=None):
    return Proc(pid=pid, ppid=ppid, comm=comm, job_id=job, local_rank=rank)


# --- which processes ---------------------------------------------------------------------------------


def test_torchrun_job_signals_the_workers_not_the_agent_shell_or_dataloaders():
    procs = [
        P(10, 1, "slurmstepd"),
        P(11, 10, "bash"),  # batch shell
        P(12, 11, "torchrun"),  # elastic agent: no LOCAL_RANK, would die of SIGUSR1
        P(13, 12, "python", rank="0"),
        P(14, 12, "python", rank="1"),
        P(15, 13, "pt_data_worker", rank="0"),  # DataLoader worker: child of a worker
        P(20, 1, "slurmd", job=None),
        P(30, 1, "sshd", job=None),
    ]
    assert [p.pid for p in select_targets(procs)["7"]] == [13, 14]


def test_plain_job_signals_its_leaf_processes_never_slurmstepd():
    procs = [P(10, 1, "slurmstepd"), P(11, 10, "bash"), P(12, 11, "python"), P(13, 10, "slurmstepd")]
    assert [p.pid for p in select_targets(procs)["7"]] == [12]


def test_targets_are_grouped_per_job():
    procs = [
        P(11, 1, "bash", job="1"),
        P(12, 11, "python", job="1", rank="0"),
        P(21, 1, "bash", job="2"),
        P(22, 21, "sleep", job="2"),
    ]
    got = {j: [p.pid for p in ps] for j, ps in select_targets(procs).items()}
    assert got == {"1": [12], "2": [22]}


def _spawn(env_extra: dict, marker) -> subprocess.Popen:
    code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGUSR1, lambda *a: (open({str(marker)!r}, 'w').write('got'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LOCAL_RANK"))}
    p = subprocess.Popen(
        [sys.executable, "-c", code], env={**env, **env_extra}, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def test_scan_finds_real_processes_of_a_job_and_the_handler_signals_them(tmp_path):
    job = f"test-{uuid.uuid4().hex[:8]}"
    w0 = _spawn({"SLURM_JOB_ID": job, "LOCAL_RANK": "0", "BURSTD_PREEMPTIBLE": "1"}, tmp_path / "w0")
    w1 = _spawn({"SLURM_JOB_ID": job, "LOCAL_RANK": "1", "BURSTD_PREEMPTIBLE": "1"}, tmp_path / "w1")
    other = _spawn({}, tmp_path / "other")  # no job: never touched
    try:
        mine = [p for p in scan_processes() if p.job_id == job]
        assert sorted(p.pid for p in mine) == sorted([w0.pid, w1.pid])
        assert all(p.start_ticks > 0 for p in mine)
        drained = []
        h = NoticeHandler(
            "cloud7",
            drain=lambda n, r: drained.append((n, r)),
            targets=lambda torch_jobs: {
                j: ps for j, ps in find_targets(torch_jobs=torch_jobs).items() if j == job
            },
        )
        h.handle([Notice("interruption", "terminate", time.time() + 60, "local")])
        assert w0.wait(10) == 0 and w1.wait(10) == 0
        assert (tmp_path / "w0").read_text() == "got" and (tmp_path / "w1").read_text() == "got"
        assert other.poll() is None and not (tmp_path / "other").exists()
        assert sorted(h.signalled_jobs[job]) == sorted([w0.pid, w1.pid])
    finally:
        for p in (w0, w1, other):
            p.kill()
            p.wait()


def test_a_job_that_did_not_ask_for_the_signal_is_left_running(tmp_path):
    """A plain job (no BURSTD_PREEMPTIBLE marker) would die of SIGUSR1 and end FAILED before burstd could
    requeue it: the agent leaves it alone, and burstd requeues it when the VM goes."""
    plain, marked = f"test-{uuid.uuid4().hex[:8]}", f"test-{uuid.uuid4().hex[:8]}"
    p = _spawn({"SLURM_JOB_ID": plain}, tmp_path / "plain")
    m = _spawn({"SLURM_JOB_ID": marked, "BURSTD_PREEMPTIBLE": "1"}, tmp_path / "marked")
    try:
        procs = [x for x in scan_processes() if x.job_id in (plain, marked)]
        assert {x.job_id: x.preemptible for x in procs} == {plain: False, marked: True}
        assert set(select_targets(procs)) == {marked}
    finally:
        for x in (p, m):
            x.kill()
            x.wait()


# --- the handler ----------------------------------------------------------------------------------


class Rig:
    def __init__(self, now=1_900_000_000.0, targets=None, drain_fails=0, **kw):
        self.now = now
        self.drains: list[tuple[list[str], str]] = []
        self.kills: list[tuple[int, int]] = []
        self.reports: list[Notice] = []
        self.drain_fails = drain_fails
        self.procs = targets if targets is not None else {"7": [P(13, 12, "python", rank="0")]}
        self.h = NoticeHandler(
            "cloud7",
            drain=self.drain,
            report=self.report,
            targets=lambda torch_jobs=frozenset(): select_targets(self.flat(), torch_jobs),
            kill=lambda pid, sig: self.kills.append((pid, sig)),
            clock=lambda: self.now,
            **kw,
        )

    def flat(self):
        return [p for ps in self.procs.values() for p in ps]

    def drain(self, nodes, reason):
        if self.drain_fails:
            self.drain_fails -= 1
            raise RuntimeError("slurmctld unreachable")
        self.drains.append((nodes, reason))

    def report(self, n):
        self.reports.append(n)
        return True


def notice(deadline, kind="interruption"):
    return Notice(kind, "terminate" if kind == "interruption" else "rebalance", deadline, "aws")


def test_notice_drains_with_the_deadline_signals_and_reports_once_across_polls():
    r = Rig()
    n = notice(r.now + 120)
    for _ in range(5):
        r.h.handle([n])
        r.now += 5
    assert len(r.drains) == 1
    nodes, reason = r.drains[0]
    assert nodes == ["cloud7"]
    assert parse_preemption_reason(reason) == n  # the daemon reads the deadline back from the reason
    assert r.kills == [(13, signal.SIGUSR1)]
    assert r.reports == [n]


def test_after_the_deadline_nothing_is_done():
    r = Rig()
    r.h.handle([notice(r.now - 1)])
    assert r.drains == [] and r.kills == [] and r.reports == []


def test_lead_time_delays_the_signal_not_the_drain():
    r = Rig(lead_time_s=30, signum=signal.SIGTERM)
    n = notice(r.now + 120)
    r.h.handle([n])
    assert len(r.drains) == 1 and r.kills == []
    r.now += 29
    r.h.handle([n])
    assert r.kills == []
    r.now += 2
    r.h.handle([n])
    assert r.kills == [(13, signal.SIGTERM)]


def test_failed_drain_is_retried_next_poll_and_does_not_hold_back_the_signal():
    r = Rig(drain_fails=1)
    n = notice(r.now + 120)
    r.h.handle([n])
    assert r.drains == [] and r.kills == [(13, signal.SIGUSR1)]
    r.h.handle([n])
    assert len(r.drains) == 1 and len(r.kills) == 1


def test_processes_appearing_later_are_signalled_once_each():
    r = Rig(targets={})
    n = notice(r.now + 120)
    r.h.handle([n])
    assert r.kills == []
    r.procs = {"7": [P(13, 12, "python", rank="0")]}
    r.h.handle([n])
    r.procs = {"7": [P(13, 12, "python", rank="0"), P(14, 12, "python", rank="1")]}
    r.h.handle([n])
    assert [k[0] for k in r.kills] == [13, 14]


def test_rebalance_drains_but_signals_nobody():
    r = Rig()
    r.h.handle([notice(r.now, kind="rebalance")])
    r.h.handle([notice(r.now, kind="rebalance")])
    assert len(r.drains) == 1 and r.drains[0][1].startswith("burstd-rebalance:")
    assert r.kills == []


@pytest.mark.parametrize("mode,drains", [("report", 0), ("ignore", 0)])
def test_rebalance_modes(mode, drains):
    r = Rig(on_rebalance=mode)
    r.h.handle([notice(r.now, kind="rebalance")])
    assert len(r.drains) == drains
    assert len(r.reports) == (1 if mode == "report" else 0)


def test_rebalance_never_overwrites_an_interruption_drain_reason():
    r = Rig()
    n = notice(r.now + 120)
    r.h.handle([n, notice(r.now, kind="rebalance")])
    assert len(r.drains) == 1 and r.drains[0][1].startswith("burstd-preempt:")


def test_torchrun_agent_is_never_signalled_even_after_its_workers_exit():
    tree = [
        P(11, 1, "bash"),
        P(12, 11, "pt_elastic"),
        P(13, 12, "python", rank="0"),
        P(14, 12, "python", rank="1"),
    ]
    r = Rig(targets={"7": tree})
    n = notice(r.now + 120)
    r.h.handle([n])
    assert sorted(k[0] for k in r.kills) == [13, 14]
    r.procs = {"7": [P(11, 1, "bash"), P(12, 11, "pt_elastic")]}  # the workers checkpointed and exited
    r.now += 5
    r.h.handle([n])
    assert sorted(k[0] for k in r.kills) == [13, 14]  # neither torchrun's agent nor the batch shell
    assert select_targets(r.flat()) == {"7": []}  # a shell waiting on torchrun is not a leaf either
