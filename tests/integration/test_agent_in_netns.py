"""The agent as the local provider runs it: inside a namespace VM, beside that VM's metadata endpoint.

Real network namespaces, real metadata server on the VM's own 169.254.169.254, real agent process, real
"job" processes in two VMs sharing one PID namespace; only ``scontrol`` is a recording stand-in (the
drain through real Slurm is covered by tests/integration/test_preemption_storm.py on the bed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from burstd.domain.preemption import parse_preemption_reason
from burstd.providers.local.preemption import agent_argv, preempt, start_vm_services

pytestmark = [pytest.mark.bed]


def _need_root():
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("needs root, ip and nsenter (network namespaces)")


def _job_in(netns: str, job_id: str, marker: Path, local_rank: str | None = "0") -> subprocess.Popen:
    code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGUSR1, lambda *a: (open({str(marker)!r}, 'w').write('USR1'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": job_id, "BURSTD_PREEMPTIBLE": "1"}
    if local_rank is not None:
        env["LOCAL_RANK"] = local_rank
    p = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{netns}", sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def _wait(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def two_vms():
    _need_root()
    tag = uuid.uuid4().hex[:6]
    names = [f"zz-agt-{tag}-a", f"zz-agt-{tag}-b"]
    for ns in names:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    yield names
    for ns in names:
        pids = subprocess.run(
            ["ip", "netns", "pids", ns], check=False, capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_notice_reaches_the_agent_in_its_vm_which_drains_and_signals_only_its_own_jobs(two_vms, tmp_path):
    vm_a, vm_b = two_vms
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {tmp_path}/scontrol.log\n')
    (bin_dir / "scontrol").chmod(0o755)
    records = tmp_path / "records"
    argv = agent_argv("zzcloud1", metadata_port=1338, poll_interval_s=0.2) + ["--slurm-bin-dir", str(bin_dir)]
    extra = start_vm_services(
        netns=vm_a, node="zzcloud1", address="10.0.0.1", instance_id="i-a", records_dir=records, agent=argv
    )
    assert extra["metadata_url"] == "http://169.254.169.254:1338"
    job = f"9{uuid.uuid4().int % 10**6}"
    mine = _job_in(vm_a, job, tmp_path / "a.marker")
    theirs = _job_in(vm_b, job, tmp_path / "b.marker")  # same job id, other VM: must be left alone
    try:
        time.sleep(1.0)  # the agent polls a few times with no notice: nothing happens
        assert not (tmp_path / "scontrol.log").exists() and mine.poll() is None
        deadline = preempt(records, vm_a, notice_s=60, reclaim=False)
        _wait(lambda: (tmp_path / "a.marker").exists(), 20, "the job in the preempted VM to get SIGUSR1")
        assert mine.wait(10) == 0
        log = _wait(
            lambda: (tmp_path / "scontrol.log").exists() and (tmp_path / "scontrol.log").read_text(),
            10,
            "the drain",
        )
        args = log.splitlines()
        assert args[:3] == ["update", "nodename=zzcloud1", "state=DRAIN"]
        assert parse_preemption_reason(args[3].removeprefix("reason=")).deadline == deadline
        time.sleep(1.0)  # more polls of the same notice: no second drain, the other VM's job untouched
        assert (tmp_path / "scontrol.log").read_text() == log
        assert theirs.poll() is None and not (tmp_path / "b.marker").exists()
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait()
    agent_log = (records / f"{vm_a}.imds" / "agent.log").read_text()
    assert f"job={job}" in agent_log and "signal=SIGUSR1" in agent_log, agent_log[-3000:]


def test_random_preemption_rate_announces_then_reclaims_the_vm(tmp_path):
    """PreemptionHook with preempt_rate_per_hour: the VM gets a notice at a random time (here within
    seconds), its agent sees it, and at the deadline the VM is gone."""
    from types import SimpleNamespace

    from burstd.config import parse_config
    from burstd.providers.local.preemption import PreemptionHook, metadata_dir

    _need_root()
    ns = f"zz-agt-{uuid.uuid4().hex[:6]}-r"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "scontrol").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {tmp_path}/scontrol.log\n')
        (bin_dir / "scontrol").chmod(0o755)
        cfg = parse_config(
            {
                "daemon": {"state_dir": str(tmp_path / "state")},
                "slurm": {"bin_dir": str(bin_dir)},
                "agent": {"poll_interval_s": 0.2, "daemon_url": f"unix:{tmp_path}/no-daemon.sock"},
                "pools": [
                    {
                        "name": "p",
                        "provider": "local",
                        "partition": "cloud",
                        "node_prefix": "zzc",
                        "node_count": 1,
                        "price_per_hour": 0.1,
                        "instance_types": [{"name": "n", "cpus": 1, "memory_mb": 100}],
                        # the notice comes within about a second of the VM's start; 15 s of it leave the agent
                        # (a fresh Python process, slow on a loaded host) time to start and see it, which on a
                        # real spot VM it has had for hours (with 2 s, a loaded CI host lost that race)
                        "local": {"preempt_rate_per_hour": 3600 * 20, "notice_s": 15},
                    }
                ],
            }
        )
        hook = PreemptionHook(cfg, cfg.pools[0])
        vm = SimpleNamespace(netns=ns, node_name="zzc1", ip="10.0.0.9", instance_id="i-r", tags={}, extra={})
        vm.extra = hook.vm_started(vm)
        assert vm.extra["chaos_pid"]
        _wait(
            lambda: (tmp_path / "scontrol.log").exists(), 20, "the random notice to reach the agent (drain)"
        )
        assert "state=DRAIN" in (tmp_path / "scontrol.log").read_text()
        _wait(lambda: not os.path.exists(f"/run/netns/{ns}"), 45, "the VM to be reclaimed at the deadline")
        # the reclaimer logs after it has taken the namespace away: a moment later under load
        reclaim_log = metadata_dir(hook.records_dir, ns) / "reclaim.log"
        _wait(lambda: "reclaimed" in reclaim_log.read_text(), 30, "the reclaimer to log the reclaim")
    finally:
        if os.path.exists(f"/run/netns/{ns}"):
            for pid in subprocess.run(
                ["ip", "netns", "pids", ns], check=False, capture_output=True, text=True
            ).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], check=False)


def test_preempt_without_notice_is_a_power_off_no_process_gets_a_sigterm_grace(two_vms, tmp_path):
    """`burstctl preempt NODE --notice 0`: no notice is published (the agent would see nothing) and every
    process of the VM is SIGKILLed at once, so a job's SIGTERM handler never runs (no free checkpoint)."""
    from burstd.providers.local.preemption import metadata_dir, read_notice

    vm, other = two_vms
    code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(tmp_path / 'term')!r}, 'w').write('TERM'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    job = subprocess.Popen(["nsenter", f"--net=/run/netns/{vm}", sys.executable, "-c", code],
                           stdout=subprocess.PIPE, text=True)
    bystander = _job_in(other, "1", tmp_path / "other.marker")
    try:
        assert job.stdout.readline().strip() == "ready"
        records = tmp_path / "records"
        preempt(records, vm, 0)
        assert job.wait(10) == -9  # SIGKILL, not a handled SIGTERM
        assert not (tmp_path / "term").exists()
        assert read_notice(metadata_dir(records, vm)) is None
        assert not Path(f"/run/netns/{vm}").exists() and bystander.poll() is None
    finally:
        for p in (job, bystander):
            p.kill()
            p.wait()


def test_poweroff_from_inside_ends_every_process_of_the_vm_and_the_vm_itself(two_vms, tmp_path):
    """The local VM's own shutdown (what the agent's dead-man switch runs): run inside the namespace, it ends
    everything else there, unlinks the namespace (the kernel frees it and its veth once the caller exits) and
    drops the VM's record, so the provider no longer lists it; the VM beside it is untouched."""
    from burstd.providers.local import netns as vms
    from burstd.providers.local.preemption import poweroff_argv

    vm, other = two_vms
    records = tmp_path / "records"
    records.mkdir()
    vms.write_record(records, vms.VmRecord(netns=vm, node_name="zzc1", hostname="zzc1",
                                           address="10.0.0.1/24", bridge="br-none", veth="vh-none",
                                           instance_id="i-p"))
    job = _job_in(vm, "1", tmp_path / "m")
    bystander = _job_in(other, "2", tmp_path / "o")
    try:
        out = subprocess.run(["nsenter", f"--net=/run/netns/{vm}", *poweroff_argv(records, vm)],
                             capture_output=True, text=True, timeout=30,
                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": os.getcwd()})
        assert out.returncode == 0, out.stderr
        assert "powered off from inside" in out.stderr and "processes_stopped=1" in out.stderr
        assert job.wait(10) is not None
        assert not Path(f"/run/netns/{vm}").exists() and vms.read_record(records, vm) is None
        assert bystander.poll() is None
    finally:
        for p in (job, bystander):
            p.kill()
            p.wait()
