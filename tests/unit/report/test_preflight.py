"""``burstctl doctor``: what a new site gets wrong, named with its fix (issue 26 item 3; issue 21 item 2's loud
warning when Slurm does not enforce associations)."""

from __future__ import annotations

import json
import os
import stat

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.report.preflight import (
    config_findings, failed, is_burstd_hook, munge_finding, parse_show_config, slurm_findings,
)

POOL = {"name": "aws", "provider": "aws", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "aws": {"region": "us-east-1", "launch_template": "lt-1", "subnets": ["subnet-1"]},
        "instance_types": [{"name": "c5.large", "cpus": 2, "memory_mb": 4096}], "price_per_hour": 0.05}
LOCAL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 2,
         "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}

# the lines of a real 22.05 `scontrol show config` that the rules read (the bed's, with burstd's hooks)
GOOD = """Configuration data as of 2026-11-26T10:00:00
AccountingStorageEnforce = associations,limits,qos
AccountingStorageType   = accounting_storage/slurmdbd
ResumeFailProgram       = /usr/lib/burstd/hooks/resume-fail
ResumeProgram           = /usr/lib/burstd/hooks/resume
ResumeTimeout           = 900 sec
SlurmctldAddr           = (null)
SlurmctldHost[0]        = head(10.0.0.5)
SuspendProgram          = /usr/lib/burstd/hooks/suspend
SuspendTime             = 300 sec
"""


def _by(findings, check):
    return next(f for f in findings if f.check == check)


def test_show_config_is_read_as_keys_and_values():
    v = parse_show_config(GOOD)
    assert v["AccountingStorageEnforce"] == "associations,limits,qos" and v["SlurmctldHost[0]"] == "head(10.0.0.5)"
    assert "Configuration data as of 2026-11-26T10" not in v


def test_a_site_set_up_as_the_guide_says_passes():
    found = slurm_findings(parse_show_config(GOOD), parse_config({"pools": [POOL]}))
    assert not failed(found), [f for f in found if f.level != "ok"]


def test_no_association_enforcement_fails_loudly_with_the_fix():
    text = GOOD.replace("associations,limits,qos", "none")
    f = _by(slurm_findings(parse_show_config(text), parse_config({"pools": [POOL]})), "association enforcement")
    assert f.level == "fail" and "any `sbatch -A` string" in f.detail
    assert "AccountingStorageEnforce=associations" in f.fix


def test_no_slurmdbd_hooks_elsewhere_no_suspend_and_a_loopback_slurmctld_each_fail():
    text = (GOOD.replace("accounting_storage/slurmdbd", "accounting_storage/none")
            .replace("/usr/lib/burstd/hooks/resume\n", "/opt/other/resume\n").replace("300 sec", "NONE")
            .replace("head(10.0.0.5)", "head(127.0.0.1)"))
    found = slurm_findings(parse_show_config(text), parse_config({"pools": [POOL]}), read=lambda p: "#!/bin/sh\n")
    for check in ("slurmdbd", "ResumeProgram", "SuspendTime", "cloud nodes reach slurmctld"):
        assert _by(found, check).level == "fail", check
    assert _by(found, "SuspendProgram").level == "ok"
    # a local pool's VMs live on the head node: loopback is no problem there
    local = slurm_findings(parse_show_config(text), parse_config({"pools": [LOCAL]}), read=lambda p: "")
    assert all(f.check != "cloud nodes reach slurmctld" for f in local)


def test_a_hook_installed_elsewhere_counts_when_it_runs_burstds_entry_point():
    assert is_burstd_hook("/etc/slurm/resume.sh", read=lambda p: "exec python3 -m burstd.daemon.hooks resume")
    assert not is_burstd_hook("/etc/slurm/resume.sh", read=lambda p: "#!/bin/sh\nexit 0\n")
    assert not is_burstd_hook("(null)")


def test_a_short_resume_timeout_and_unwise_settings_warn():
    text = GOOD.replace("900 sec", "60 sec")
    cfg = parse_config({"pools": [POOL], "daemon": {"metrics_port": 9464, "metrics_address": "0.0.0.0"},
                        "budget": {"default_account_usd": 50}})
    assert _by(slurm_findings(parse_show_config(text), cfg), "ResumeTimeout").level == "warn"
    assert {f.check for f in config_findings(cfg)} == {"metrics port", "default budget"}


def test_munge_is_judged_by_a_credential_round_trip():
    calls = []

    def run(argv, stdin):
        calls.append((argv, stdin))
        return (0, "CRED:xyz") if argv == ["munge", "-n"] else (0, "STATUS: Success (0)")

    assert munge_finding(run).level == "ok" and calls[1] == (["unmunge"], "CRED:xyz")
    dead = munge_finding(lambda argv, stdin: (1, "munge: Error: Failed to access \"/run/munge/munge.socket.2\""))
    assert dead.level == "fail" and "munge.socket" in dead.detail and "munged" in dead.fix


def test_the_command_reads_slurmctld_through_the_configs_bin_dir_and_exits_1_on_a_failure(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    scontrol = bin_dir / "scontrol"
    # as scontrol does, it reads the slurm.conf SLURM_CONF names: the config's, not this shell's
    slurm_conf = tmp_path / "etc" / "slurm.conf"
    monkeypatch.setenv("SLURM_CONF", "/nowhere/slurm.conf")
    scontrol.write_text(f'#!/bin/sh\n[ "$SLURM_CONF" = "{slurm_conf}" ] || {{ echo "scontrol: fatal: Could not '
                        'establish a configuration source" >&2; exit 1; }\n'
                        "cat <<'EOF'\n" + GOOD.replace("associations,limits,qos", "none") + "EOF\n")
    scontrol.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    cfg = tmp_path / "burstd.toml"
    cfg.write_text(f'[slurm]\nbin_dir = "{bin_dir}"\nconf = "{slurm_conf}"\n[daemon]\nstate_dir = "{tmp_path}/state"\n'
                   f'[api]\nsocket = "{tmp_path}/run/burstd.sock"\n'
                   '[[pools]]\nname = "local"\nprovider = "local"\npartition = "cloud"\nnode_prefix = "cloud"\n'
                   'node_count = 2\nprice_per_hour = 0.5\n'
                   '[[pools.instance_types]]\nname = "ns"\ncpus = 2\nmemory_mb = 1000\n')
    r = CliRunner().invoke(app, ["doctor", "-c", str(cfg), "--json"])
    assert r.exit_code == 1, r.output
    found = {f["check"]: f for f in json.loads(r.stdout)}
    assert found["association enforcement"]["level"] == "fail"
    assert found["slurmdbd"]["level"] == "ok" and found["daemon"]["level"] == "warn"
    r = CliRunner().invoke(app, ["doctor", "-c", str(cfg)])
    assert r.exit_code == 1 and "association" in r.output
