"""The one slurm.conf generator (burstd/slurm/conf.py), behind `burstctl slurm-conf` and the test bed."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.slurm.conf import slurm_conf_lines

POOLS = [
    {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
     "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.1},
    {"name": "gpu", "provider": "local", "partition": "cloud-gpu", "node_prefix": "gpu", "node_count": 2,
     "instance_types": [{"name": "g", "cpus": 8, "memory_mb": 64000, "gpus": 4, "gpu_type": "a100"}],
     "price_per_hour": 3.0, "market": "on-demand"},
]


def test_a_cloud_node_and_partition_line_per_pool():
    cfg = parse_config({"pools": POOLS, "policy": {"onprem_partitions": ["batch", "debug"]}})
    lines = slurm_conf_lines(cfg, release=(22, 5), hook_dir="/opt/hooks", suspend_time=120)
    assert "ResumeProgram=/opt/hooks/resume" in lines and "SuspendTime=120" in lines
    assert "ResumeFailProgram=/opt/hooks/resume-fail" in lines
    assert "SuspendExcParts=batch,debug" in lines
    assert "NodeName=cloud[1-4] CPUs=2 RealMemory=1000 State=CLOUD Feature=cloud,pool_local,spot" in lines
    assert "NodeName=gpu[1-2] CPUs=8 RealMemory=64000 Gres=gpu:a100:4 State=CLOUD Feature=cloud,pool_gpu,ondemand" \
        in lines
    assert "PartitionName=cloud-gpu Nodes=gpu[1-2] MaxTime=INFINITE State=UP" in lines


@pytest.mark.parametrize(("release", "params", "requeue_on_failure", "metrics"), [
    ((22, 5), "idle_on_node_suspend,cloud_reg_addrs,enable_configless", False, False),
    ((23, 11), "idle_on_node_suspend,cloud_reg_addrs,enable_configless", False, False),
    ((24, 11), "idle_on_node_suspend,enable_configless", False, False),  # defunct (fatal) from 24.11
    ((25, 5), "idle_on_node_suspend,enable_configless", True, False),
    ((25, 11), "idle_on_node_suspend,enable_configless,enable_expedited_requeue", True, True),
    ((26, 5), "idle_on_node_suspend,enable_configless,enable_expedited_requeue", True, True),
])
def test_release_decides_the_parameters(release, params, requeue_on_failure, metrics):
    lines = slurm_conf_lines(parse_config({"pools": POOLS}), release=release)
    assert f"SlurmctldParameters={params}" in lines
    assert sum(line.startswith("SlurmctldParameters=") for line in lines) == 1
    assert ("SchedulerParameters=requeue_on_resume_failure" in lines) is requeue_on_failure
    assert ("MetricsType=metrics/openmetrics" in lines) is metrics


def test_accounting_adds_gpu_tres_and_the_bed_can_name_its_hook_files():
    hooks = {"resume": "/s/hooks/resume", "suspend": "/s/hooks/suspend", "resume_fail": "/s/hooks/resume_fail"}
    lines = slurm_conf_lines(parse_config({"pools": POOLS}), release=(24, 11), hooks=hooks, accounting=True,
                             resume_timeout=60, suspend_timeout=15)
    assert {"AccountingStorageTRES=gres/gpu", "GresTypes=gpu", "ResumeFailProgram=/s/hooks/resume_fail",
            "ResumeTimeout=60", "SuspendTimeout=15"} <= set(lines)


def test_burstctl_slurm_conf_takes_the_release(tmp_path):
    path = tmp_path / "burstd.toml"
    path.write_text('[[pools]]\nname = "local"\nprovider = "local"\npartition = "cloud"\nnode_prefix = "c"\n'
                    'node_count = 2\nprice_per_hour = 0.1\n[[pools.instance_types]]\nname = "ns"\ncpus = 2\n'
                    'memory_mb = 1000\n')
    out = CliRunner().invoke(app, ["slurm-conf", "--config", str(path), "--slurm-release", "26.05"])
    assert out.exit_code == 0, out.output
    assert "SlurmctldParameters=idle_on_node_suspend,enable_configless" in out.output
    assert "SchedulerParameters=requeue_on_resume_failure" in out.output
    bad = CliRunner().invoke(app, ["slurm-conf", "--config", str(path), "--slurm-release", "latest"])
    assert bad.exit_code == 2 and "MAJOR.MINOR" in bad.output


def test_slurm_conf_refuses_values_that_would_inject_a_setting(tmp_path):
    cfg = parse_config({"pools": POOLS})
    for hook_dir in ("/opt/hooks\nResumeProgram=/tmp/evil", "/opt/my hooks", "/opt/#hooks"):
        with pytest.raises(ValueError, match="--hook-dir"):
            slurm_conf_lines(cfg, release=(22, 5), hook_dir=hook_dir)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[pools]]\nname = "p"\nprovider = "local"\npartition = "cloud"\nnode_prefix = "c"\n'
                   'node_count = 1\nprice_per_hour = 0.1\nfeatures = ["x\\nResumeProgram=/tmp/evil"]\n'
                   'instance_types = [{ name = "s", cpus = 1, memory_mb = 100 }]\n')
    res = CliRunner().invoke(app, ["slurm-conf", "-c", str(bad), "--slurm-release", "22.05"])
    assert res.exit_code == 2 and "pools[0].features[0]" in res.stderr and "ResumeProgram=/tmp" not in res.stdout
    good = tmp_path / "good.toml"
    good.write_text(bad.read_text().replace('"x\\nResumeProgram=/tmp/evil"', '"x"'))
    res = CliRunner().invoke(app, ["slurm-conf", "-c", str(good), "--hook-dir", "/opt/a b",
                                  "--slurm-release", "24.11"])
    assert res.exit_code == 2 and "--hook-dir" in res.stderr and res.stdout == ""


def test_partitions_carry_the_eligibility_rule_slurm_can_enforce():
    """Excluded accounts and QOS and ``pools[].accounts`` go into the pool's partition line, so Slurm refuses a job
    sent straight to it at submission (a cloud node already up runs it without asking burstd)."""
    pools = [dict(POOLS[0]), dict(POOLS[1], accounts=["chem", "excl", "bio"])]
    cfg = parse_config({"pools": pools, "policy": {"exclude_accounts": ["excl", "guest"],
                                                   "exclude_qos": ["nocloud"], "exclude_users": ["mallory"]}})
    lines = slurm_conf_lines(cfg, release=(24, 11))
    assert "PartitionName=cloud Nodes=cloud[1-4] MaxTime=INFINITE State=UP DenyAccounts=excl,guest DenyQos=nocloud" \
        in lines
    assert ("PartitionName=cloud-gpu Nodes=gpu[1-2] MaxTime=INFINITE State=UP AllowAccounts=chem,bio "
            "DenyQos=nocloud") in lines
    assert not [line for line in lines if "mallory" in line]  # no partition setting names users
    plain = slurm_conf_lines(parse_config({"pools": POOLS}), release=(24, 11))
    assert not [line for line in plain if "Allow" in line or "Deny" in line]


def test_an_account_that_would_inject_a_setting_is_refused():
    cfg = parse_config({"pools": POOLS, "policy": {"exclude_accounts": ["a Nodes=evil"]}})
    with pytest.raises(ValueError, match="policy.exclude_accounts"):
        slurm_conf_lines(cfg, release=(24, 11))
