"""Test bed settings and generated files (no root needed): slurm.conf, hooks, burstd config, names."""

from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

from burstd.config import parse_config
from burstd.providers.local import netns
from burstd.testbed import render
from burstd.testbed.config import BedConfig


def test_default_bed_matches_the_lab_layout_and_the_local_pool_defaults():
    cfg = BedConfig().resolved()
    assert (cfg.subnet, cfg.ctld_port, cfg.rest_port, cfg.bridge, cfg.netns_prefix) == (
        "10.77.0.0/24", 6817, 6820, "br-slurm", "sl-")
    assert cfg.node_address("onprem1") == "10.77.0.11/24" and cfg.node_address("cloud4") == "10.77.0.104/24"
    assert cfg.conf_server == "10.77.0.1:6817"
    with pytest.raises(ValueError, match="not a node"):
        cfg.node_address("cloud5")


def test_named_beds_get_their_own_subnet_ports_bridge_and_prefix():
    a, b = BedConfig.from_env({}, name="alpha").resolved(), BedConfig.from_env({}, name="beta").resolved()
    default = BedConfig().resolved()
    for key in ("subnet", "ctld_port", "rest_port", "bridge", "netns_prefix", "state_dir"):
        assert len({getattr(a, key), getattr(b, key), getattr(default, key)}) == 3, key
    assert len(a.bridge) <= netns.IFNAMSIZ
    assert BedConfig.from_env({"BURSTD_BED_NAME": "alpha", "BURSTD_BED_SLOT": "7"}).network.exploded == \
        "10.84.0.0/24"


@pytest.mark.parametrize("bad", [
    {"name": "Bad Name"}, {"name": "x" * 13}, {"subnet": "10.77.0.0/26", "cloud_count": 200},
    {"onprem_prefix": "cloud"}, {"hooks": "magic"}, {"ctld_port": 6820, "rest_port": 6820},
])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        BedConfig(**bad)


def test_slurm_conf_keeps_every_path_in_the_state_dir_and_carries_the_lab_lines(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), suspend_time=12).resolved()
    conf = render.slurm_conf(cfg, hostname="head")
    assert "/etc/slurm" not in conf
    for line in ("SlurmctldHost=head(10.77.0.1)", "PrivateData=cloud", "AuthInfo=cred_expire=30",
                 "SlurmctldParameters=idle_on_node_suspend,cloud_reg_addrs,enable_configless",
                 "SuspendTime=12", "SuspendExcParts=onprem", "MaxJobCount=100000", "MaxArraySize=100001",
                 f"ResumeProgram={tmp_path}/hooks/resume",
                 f"AuthAltParameters=jwt_key={tmp_path}/jwt_hs256.key",
                 "NodeName=onprem2 NodeAddr=10.77.0.12 CPUs=2 RealMemory=1000 State=UNKNOWN",
                 "NodeName=cloud[1-4] CPUs=2 RealMemory=1000 State=CLOUD Feature=cloud",
                 "PartitionName=onprem Nodes=onprem[1-2] Default=YES MaxTime=INFINITE State=UP",
                 "PartitionName=cloud Nodes=cloud[1-4] MaxTime=INFINITE State=UP"):
        assert line + "\n" in conf, line
    for line in conf.splitlines():
        if "=" in line and line.split("=", 1)[1].startswith("/"):
            assert str(tmp_path) in line, line


@pytest.mark.parametrize("mode", ["stub", "bare", "burstd"])
@pytest.mark.parametrize("hook", render.HOOK_NAMES)
def test_every_hook_script_is_valid_shell_with_a_sane_path(mode, hook, tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path)).resolved()
    script = render.hook_script(cfg, hook, mode)
    assert script.startswith("#!/bin/sh\n") and f"PATH={netns.SANE_PATH}\n" in script
    assert f"SLURM_CONF={tmp_path}/slurm.conf" in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0


def test_bare_resume_builds_each_cloud_node_like_netns_create(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), cloud_count=3).resolved()
    script = render.hook_script(cfg, "resume", "bare")
    for node in cfg.cloud_nodes:
        spec = render.vm_spec(cfg, node, boot_flag=True)
        for argv in netns.network_commands(spec):
            assert " ".join(argv) in script
        assert f"-b -N {node} --conf-server 10.77.0.1:6817" in script
        assert "ip netns exec" not in script  # it hides /sys/fs/cgroup from slurmd
    assert "cloud4)" not in script


def test_burstd_hooks_exec_the_daemon_hook_module_with_the_config(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), python="/opt/venv/bin/python").resolved()
    script = render.hook_script(cfg, "resume_fail", "burstd")
    assert f"BURSTD_CONFIG={tmp_path}/burstd.toml\n" in script
    assert 'exec /opt/venv/bin/python -m burstd.daemon.hooks resume-fail "$@"\n' in script


def test_generated_burstd_config_is_valid_and_points_at_the_bed(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), name="demo", slot=3).resolved()
    import tomllib

    conf = parse_config(tomllib.loads(render.burstd_toml(cfg)))
    pool = conf.pool("local")
    assert (pool.local.subnet, pool.local.bridge, pool.local.netns_prefix, pool.local.conf_server) == (
        "10.80.0.0/24", "br-demo", "demo-", "10.80.0.1:7117")
    assert pool.partition == "cloud" and pool.node_names == ["cloud1", "cloud2", "cloud3", "cloud4"]
    assert conf.slurm.conf == f"{tmp_path}/slurm.conf" and conf.cluster.id == "demo"


def test_vm_names_are_validated_and_veths_fit_ifnamsiz():
    assert len(netns.veth_name("a-very-long-namespace-name-for-a-node-12345")) <= netns.IFNAMSIZ
    assert netns.veth_name("sl-cloud1") != netns.veth_name("bedtwo-cloud1")
    for bad in ({"netns": "x;rm -rf /"}, {"node_name": "a b"}, {"address": "10.0.0.300/24"},
                {"bridge": "a-bridge-name-too-long"}, {"conf_server": "$(reboot)"}):
        kwargs = {"netns": "sl-x", "node_name": "x", "address": "10.0.0.2/24", "bridge": "br0", **bad}
        with pytest.raises(ValueError):
            netns.VmSpec(**kwargs)
    argv = netns.start_argv(netns.VmSpec(netns="sl-c1", node_name="c1", address="10.0.0.2/24", bridge="br0",
                                         conf_server="10.0.0.1:6817"))
    assert argv[:2] == ["nsenter", "--net=/run/netns/sl-c1"] and "unshare" in argv and argv[-4:] == [
        "-N", "c1", "--conf-server", "10.0.0.1:6817"]

