"""The agent's dead-man switch: an idle node cut off from every burstd powers off after the configured time; a node
running a job never does for an outage; a node whose lease burstd no longer knows powers off at once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from burstd.agent.deadman import DeadManSwitch, Probe, probe_daemons
from tests.fakes.unix_api import UnixJsonApi

REPO = str(Path(__file__).resolve().parents[3])


class World:
    def __init__(self):
        self.t = 0.0
        self.seen = Probe.LEASE_OPEN
        self.job = False
        self.powered_off: list[str] = []

    def switch(self, timeout_s=60.0):
        return DeadManSwitch("cloud1", timeout_s=timeout_s, probe=lambda: self.seen, busy=lambda: self.job,
                             power_off=self.powered_off.append, clock=lambda: self.t)


@pytest.fixture
def world():
    return World()


def test_idle_node_cut_off_powers_off_only_after_the_timeout(world):
    sw = world.switch()
    sw.check()
    world.seen = Probe.UNREACHABLE
    for t in (1, 30, 60.9):  # the probe at 1 s is the first to find no burstd
        world.t = t
        assert sw.check() is None
    world.t = 61.0
    assert "no burstd reachable for 60s and no job" in sw.check()
    world.t = 70
    sw.check()
    assert len(world.powered_off) == 1  # once


def test_a_running_job_keeps_the_node_up_however_long_the_outage(world):
    sw = world.switch()
    world.seen, world.job = Probe.UNREACHABLE, True
    for t in (61, 600, 6000):
        world.t = t
        assert sw.check() is None
    world.job = False  # the job ended, still no burstd: off
    world.t = 6001
    assert sw.check() is not None and len(world.powered_off) == 1


def test_contact_with_any_burstd_restarts_the_count(world):
    sw = world.switch()
    world.seen = Probe.UNREACHABLE
    world.t = 50
    sw.check()
    world.seen = Probe.REACHED  # the standby answered (no read rights for leases): still contact
    world.t = 55
    sw.check()
    world.seen = Probe.UNREACHABLE
    world.t = 110  # the first probe that finds none: the outage is counted from here, never from the contact
    assert sw.check() is None
    world.t = 169.9
    assert sw.check() is None
    world.t = 170
    assert "no burstd reachable for 60s" in sw.check()


def test_in_touch_the_switch_probes_every_tenth_of_its_timeout_and_out_of_touch_at_every_look(world):
    """Every VM probes the daemon, so a fleet in touch asks rarely; once a probe finds no burstd, every look
    asks again, and the power-off comes at most one probe interval late, never early."""
    from burstd.agent.deadman import probe_every

    assert probe_every(900) == 30.0 and probe_every(8) == 0.8
    probes: list[float] = []

    def probe() -> Probe:
        probes.append(world.t)
        return world.seen

    sw = DeadManSwitch("cloud1", timeout_s=900, probe=probe, busy=lambda: world.job,
                       power_off=world.powered_off.append, clock=lambda: world.t, probe_every_s=probe_every(900))
    for t in range(0, 61):  # one look a second for a minute, in touch
        world.t = float(t)
        assert sw.check() is None
    assert probes == [0.0, 30.0, 60.0]
    world.seen = Probe.UNREACHABLE  # burstd goes at 61; the probe at 90 is the first to find it gone
    for t in range(61, 95):
        world.t = float(t)
        assert sw.check() is None
    assert probes == [0.0, 30.0, 60.0, 90.0, 91.0, 92.0, 93.0, 94.0]
    world.t = 989.9
    assert sw.check() is None
    world.t = 990.0
    assert "no burstd reachable for 900s and no job" in sw.check()
    assert len(world.powered_off) == 1


def test_a_lease_known_over_powers_off_at_once(world):
    sw = world.switch()
    world.seen = Probe.LEASE_OVER
    assert "no open lease for cloud1" in sw.check()
    assert world.powered_off


# -- the probe, over a real unix socket (an HTTP server standing in for a burstd's control API) -----------


class _Api(UnixJsonApi):
    """burstd's API: /healthz answers, /v1/leases gives ``leases`` (a list of lease dicts, or an int: its status)."""

    def __init__(self, path, leases):
        self.leases = leases
        super().__init__(path, lambda p: (200, {"ok": True}) if p == "/healthz" else (
            (self.leases, {"detail": "no"}) if isinstance(self.leases, int) else (200, self.leases)))


def test_the_probe_tells_open_over_contact_and_unreachable_and_tries_the_standby(tmp_path):
    api = _Api(tmp_path / "b.sock", [{"node_name": "cloud1", "state": "READY"}])
    dead = f"unix:{tmp_path / 'a.sock'}"  # the leader's host is gone
    try:
        probe = probe_daemons([dead, f"unix:{tmp_path / 'b.sock'}"], "cloud1")
        assert probe() is Probe.LEASE_OPEN
        assert api.paths[-1] == "/v1/leases?node=cloud1"  # this node's leases, not the fleet's
        api.leases = [{"node_name": "cloud2", "state": "READY"}]
        assert probe() is Probe.LEASE_OVER
        api.leases = 403  # the agent's credential may not read leases: contact only
        assert probe() is Probe.REACHED
        assert probe_daemons([dead], "cloud1")() is Probe.UNREACHABLE
    finally:
        api.close()


def test_a_power_off_command_that_cannot_run_is_logged_and_the_agent_goes_on(caplog, tmp_path):
    from burstd.agent.deadman import run_command

    run_command([str(tmp_path / "no-such-poweroff")])("test")  # no exception: the agent keeps watching notices
    failing = tmp_path / "fails"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    run_command([str(failing)])("test")
    assert "power-off command failed" in caplog.text and "power-off command exited 3" in caplog.text


# ---------------------------------------------------------------- what counts as a job on the node (issue 21 item 8)
def _fake_proc(root, procs, own_netns="net:[1]"):
    """A /proc tree: ``procs`` maps pid -> (comm, real uid, effective uid, netns)."""
    (root / "self" / "ns").mkdir(parents=True)
    (root / "self" / "ns" / "net").symlink_to(own_netns)
    for pid, (comm, ruid, euid, netns) in procs.items():
        d = root / str(pid)
        (d / "ns").mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t{ruid}\t{euid}\t{euid}\t{euid}\nGid:\t0\t0\t0\t0\n")
        (d / "ns" / "net").symlink_to(netns)
    return str(root)


@pytest.mark.parametrize("procs,busy", [
    ({10: ("slurmstepd", 0, 0, "net:[1]")}, True),  # slurmd's step daemon: root, in this VM
    ({10: ("slurmstepd", 1001, 1001, "net:[1]")}, False),  # a job's own process that took the name
    ({10: ("slurmstepd", 1001, 0, "net:[1]")}, False),  # a user running a set-uid program under that name
    ({10: ("slurmstepd", 0, 0, "net:[2]")}, False),  # another bed VM's step daemon (shared pids)
    ({10: ("sleep", 0, 0, "net:[1]"), 11: ("slurmstepd", 1001, 1001, "net:[1]")}, False),
    ({11: ("slurmstepd", 1001, 1001, "net:[1]"), 12: ("slurmstepd", 0, 0, "net:[1]")}, True),
])
def test_only_a_root_step_daemon_in_this_vm_counts_as_a_job(tmp_path, procs, busy):
    from burstd.agent.deadman import node_runs_a_job

    assert node_runs_a_job(_fake_proc(tmp_path, procs)) is busy


@pytest.fixture
def slurmstepd_copy():
    """A copy of sleep named ``slurmstepd`` where any user can run it (pytest's tmp_path is root's alone)."""
    import shutil
    import tempfile

    where = tempfile.mkdtemp(prefix="burstd-stepd-")
    os.chmod(where, 0o755)
    exe = os.path.join(where, "slurmstepd")
    shutil.copy("/bin/sleep", exe)
    os.chmod(exe, 0o755)
    yield exe
    shutil.rmtree(where)


# Run in a network namespace of its own, so that no other slurmstepd on this machine (a bed's) is in it: start
# the named process as the user (Popen returns once it has exec'd, named), then ask the switch's question.
_ASK = """
import subprocess, sys
from burstd.agent.deadman import node_runs_a_job
p = subprocess.Popen([sys.argv[1], "60"], user=sys.argv[2])
try:
    print(node_runs_a_job())
finally:
    p.kill()
"""


@pytest.mark.parametrize("user,busy", [("burstuser", False), ("root", True)])
def test_a_process_a_job_names_slurmstepd_does_not_keep_the_node_awake(slurmstepd_copy, user, busy):
    """The attack itself, with real processes: burstuser's ``slurmstepd`` is no job; a root one is."""
    import subprocess
    import sys

    out = subprocess.run(["unshare", "--net", sys.executable, "-c", _ASK, slurmstepd_copy, user],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(busy)
