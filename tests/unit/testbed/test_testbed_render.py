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
    conf = render.slurm_conf(cfg, (22, 5), hostname="head")
    assert "/etc/slurm" not in conf
    for line in ("SlurmctldHost=head(10.77.0.1)", "PrivateData=cloud", "AuthInfo=cred_expire=30",
                 "SlurmctldParameters=idle_on_node_suspend,cloud_reg_addrs,enable_configless",
                 "SuspendTime=12", "SuspendExcParts=onprem", "MaxJobCount=100000", "MaxArraySize=100001",
                 f"ResumeProgram={tmp_path}/hooks/resume",
                 f"AuthAltParameters=jwt_key={tmp_path}/jwt_hs256.key",
                 "NodeName=onprem2 NodeAddr=10.77.0.12 CPUs=2 RealMemory=1000 State=UNKNOWN",
                 "NodeName=cloud[1-4] CPUs=2 RealMemory=1000 State=CLOUD Feature=cloud,pool_local,spot",
                 "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStoragePort=6819",
                 "AccountingStorageTRES=gres/gpu",
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



def test_the_cloud_half_of_the_beds_slurm_conf_is_what_burstctl_slurm_conf_prints(tmp_path):
    """One generator: the bed boots the lines admins are told to paste, for the bed's own burstd config."""
    import tomllib

    from burstd.slurm.conf import slurm_conf_lines

    for release in ((22, 5), (24, 11), (26, 5)):
        cfg = BedConfig(state_dir=str(tmp_path), slurm_release=None if release == (22, 5) else
                        f"{release[0]}.{release[1]:02d}").resolved()
        conf = render.slurm_conf(cfg, release, hostname="head").splitlines()
        admin = slurm_conf_lines(parse_config(tomllib.loads(render.burstd_toml(cfg))), release=release,
                                 hooks={h: str(tmp_path / "hooks" / h) for h in render.HOOK_NAMES},
                                 suspend_time=cfg.suspend_time, suspend_timeout=cfg.suspend_timeout,
                                 resume_timeout=cfg.resume_timeout, accounting=True)
        assert admin == conf[len(conf) - len(admin):]
        assert ("cloud_reg_addrs" in "\n".join(conf)) is (release < (24, 11))


def test_accounting_off_and_slurmdbd_conf_stay_in_the_state_dir(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), accounting=False).resolved()
    assert "AccountingStorageType=accounting_storage/none" in render.slurm_conf(cfg, (22, 5), hostname="h")
    dbd = render.slurmdbd_conf(BedConfig(state_dir=str(tmp_path), slot=3).resolved(), "pw")
    for line in ("DbdAddr=127.0.0.1", "DbdPort=7119", "StoragePort=7121", "StoragePass=pw",
                 f"PidFile={tmp_path}/run/slurmdbd.pid", f"LogFile={tmp_path}/log/slurmdbd.log"):
        assert line in dbd.splitlines(), line


def test_a_chroot_bed_runs_slurm_through_its_wrappers_and_its_hooks_step_out(tmp_path):
    from burstd.testbed import release

    cfg = BedConfig(state_dir=str(tmp_path), slurm_release="26.05").resolved()
    toml = render.burstd_toml(cfg)
    assert f'bin_dir = "{tmp_path}/bin"' in toml and f'slurmd_path = "{tmp_path}/bin/slurmd"' in toml
    assert render.vm_spec(cfg, "cloud1", boot_flag=True).slurmd == f"{tmp_path}/bin/slurmd"
    hook = render.hook_script(cfg, "resume", "bare")
    assert hook.splitlines()[2].startswith(f"[ -e {render.CHROOT_MARK} ] && exec nsenter --mount=/proc/")
    assert f"PATH={tmp_path}/bin:" in hook
    root = tmp_path / "chroot"
    for script in (release.enter_script(root, tmp_path), release.command_script(tmp_path / "bin", "/usr/bin/x")):
        assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    assert release.user_argv(tmp_path / "bin", "burstuser", ["sbatch", "x.sh"]) == [
        f"{tmp_path}/bin/enter", "/usr/sbin/runuser", "-u", "burstuser", "--", "/usr/bin/sbatch", "x.sh"]
    # the host's 22.05 bed has no wrappers and no escape
    host = BedConfig(state_dir=str(tmp_path)).resolved()
    assert render.CHROOT_MARK not in render.hook_script(host, "resume", "bare")


@pytest.mark.parametrize("bad", [{"slurm_release": "23.02"}, {"dbd_port": 6817}, {"db_port": 6820}])
def test_bad_release_or_clashing_ports_are_refused(bad):
    with pytest.raises(ValidationError):
        BedConfig(**bad)
