"""Local provider preemption: announcing, the random rate, the reclaimer standing down."""

from __future__ import annotations

import random

import pytest

from burstd.agent.watchers import AwsImdsWatcher
from burstd.providers.local.metadata import Identity, MetadataServer, clear_notices, read_notice
from burstd.providers.local.preemption import RandomPreemptions, agent_argv, metadata_dir, preempt, reclaim_at


def test_preempt_announces_through_the_vm_metadata_and_keeps_the_first_deadline(tmp_path):
    srv = MetadataServer(
        metadata_dir(tmp_path, "sl-cloud1"), Identity("i-1", "cloud1"), "127.0.0.1", 0
    ).start()
    try:
        w = AwsImdsWatcher(srv.url, source="local")
        assert w.poll() == []
        d = preempt(tmp_path, "sl-cloud1", 45, reclaim=False, now=1_900_000_000)
        assert d == 1_900_000_045
        [n] = w.poll()
        assert n.deadline == d and n.action == "terminate"
        assert preempt(tmp_path, "sl-cloud1", 5, reclaim=False, now=1_900_000_001) == d
    finally:
        srv.stop()


def test_reclaimer_stands_down_when_the_vm_was_relaunched(tmp_path):
    d = preempt(tmp_path, "sl-cloud2", 0, reclaim=False, now=1_900_000_000)
    clear_notices(metadata_dir(tmp_path, "sl-cloud2"))  # what a relaunch does
    assert reclaim_at(tmp_path, "sl-cloud2", d, sleep=lambda s: None, clock=lambda: d) is False
    assert read_notice(metadata_dir(tmp_path, "sl-cloud2")) is None


def test_random_preemptions_follow_the_rate():
    clock = [0.0]
    rp = RandomPreemptions(6.0, rng=random.Random(1), clock=lambda: clock[0])
    vms = [f"sl-cloud{i}" for i in range(100)]
    assert rp.roll(vms) == []  # the first roll only starts the clock
    hits = 0
    for _ in range(60):  # 60 rolls of 10 s = 10 minutes at 6/h: expect ~1 - e^-1 = 63% of VMs hit once
        clock[0] += 10
        hits += len(rp.roll(vms))
    assert 70 <= hits <= 130  # mean 100 (6/h * 1/6 h * 100 VMs)


def test_zero_rate_never_preempts():
    clock = [0.0]
    rp = RandomPreemptions(0.0, clock=lambda: clock[0])
    rp.roll(["a"])
    clock[0] += 1e6
    assert rp.roll(["a"]) == []


def test_agent_argv_watches_the_vm_link_local_metadata():
    argv = agent_argv(
        "cloud1", metadata_port=1338, poll_interval_s=1, daemon_url="unix:/run/burstd/burstd.sock"
    )
    assert argv[1:3] == ["-m", "burstd.agent.main"]
    assert argv[argv.index("--metadata-url") + 1] == "http://169.254.169.254:1338"
    assert argv[argv.index("--node") + 1] == "cloud1"


def test_vm_services_plan_wires_the_agent_to_this_daemon_and_slurm():
    from burstd.config import parse_config
    from burstd.providers.local.preemption import vm_services_plan

    cfg = parse_config(
        {
            "slurm": {"conf": "/var/lib/bed/slurm.conf", "bin_dir": "/opt/slurm/bin"},
            "api": {"socket": "/run/bed/burstd.sock"},
            "agent": {"poll_interval_s": 1.5, "signal": "USR2"},
            "pools": [
                {
                    "name": "local",
                    "provider": "local",
                    "partition": "cloud",
                    "node_prefix": "cloud",
                    "node_count": 2,
                    "price_per_hour": 0.1,
                    "instance_types": [{"name": "n", "cpus": 2, "memory_mb": 1}],
                    "local": {"metadata_port": 1400},
                }
            ],
        }
    )
    argv, env, port = vm_services_plan(cfg, cfg.pools[0], "cloud2")
    opt = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1, 2)}
    assert port == 1400 and opt["--metadata-url"] == "http://169.254.169.254:1400"
    assert opt["--daemon-url"] == "unix:/run/bed/burstd.sock"
    assert opt["--poll-interval"] == "1.5" and opt["--signal"] == "USR2" and opt["--node"] == "cloud2"
    assert opt["--slurm-bin-dir"] == "/opt/slurm/bin" and opt["--slurm-conf"] == "/var/lib/bed/slurm.conf"
    assert env == {"SLURM_CONF": "/var/lib/bed/slurm.conf"}


def test_chaos_preempts_after_a_random_time_unless_the_vm_goes_first(tmp_path):
    from burstd.providers.local.preemption import chaos

    slept = []
    d = chaos(
        tmp_path,
        "sl-x",
        3600.0,
        30,
        rng=random.Random(3),
        sleep=slept.append,
        alive=lambda: True,
        reclaim=False,
    )
    assert d is not None and read_notice(metadata_dir(tmp_path, "sl-x"))[1] == d
    assert 0 < sum(slept) < 60  # mean 1 s at 3600/h
    gone = chaos(tmp_path, "sl-y", 3600.0, 30, rng=random.Random(3), sleep=slept.append, alive=lambda: False)
    assert gone is None and read_notice(metadata_dir(tmp_path, "sl-y")) is None


def test_a_local_vm_agent_powers_off_the_local_way_never_with_the_hosts_systemctl(tmp_path):
    """The dead-man switch of a bed VM must shut down that namespace only: ``systemctl poweroff`` (the default
    for a real VM) run from a namespace VM would power off the host."""
    import argparse

    from burstd.agent.main import _parser, build_config
    from burstd.config import parse_config
    from burstd.providers.local.preemption import poweroff_argv, vm_services_plan

    cfg = parse_config({
        "api": {"socket": "/run/bed/burstd.sock"},
        "agent": {"deadman_s": 12, "standby_daemon_urls": ["unix:/run/bed2/burstd.sock"]},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 2, "price_per_hour": 0.1,
                   "instance_types": [{"name": "n", "cpus": 2, "memory_mb": 1}],
                   "local": {"records_dir": str(tmp_path)}}],
    })
    argv, _, _ = vm_services_plan(cfg, cfg.pools[0], "cloud2", netns="sl-cloud2", records_dir=tmp_path)
    args = _parser().parse_args(argv[3:])
    assert isinstance(args, argparse.Namespace)
    agent, _ = build_config(args)
    assert agent.deadman_s == 12 and agent.daemon_url == "unix:/run/bed/burstd.sock"
    assert agent.standby_daemon_urls == ["unix:/run/bed2/burstd.sock"]
    assert agent.poweroff_command == poweroff_argv(tmp_path, "sl-cloud2")
    assert agent.poweroff_command[1:4] == ["-m", "burstd.providers.local.preemption", "poweroff"]
    assert "systemctl" not in argv
    # without a namespace to shut down, the switch is off (never the host's shutdown)
    argv, _, _ = vm_services_plan(cfg, cfg.pools[0], "cloud2")
    agent, _ = build_config(_parser().parse_args(argv[3:]))
    assert agent.deadman_s == 0 and agent.poweroff_command == ["systemctl", "poweroff"]


def test_poweroff_refuses_a_bad_namespace_name(tmp_path):
    from burstd.providers.local.preemption import power_off_from_inside

    with pytest.raises(ValueError, match="invalid namespace"):
        power_off_from_inside(tmp_path, "../etc")
