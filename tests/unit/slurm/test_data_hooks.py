"""The data Prolog/Epilog (burstd/slurm/data_hooks.py): slurm.conf lines and the wrapper scripts, run for real
with /bin/sh against a stand-in burstd-agent that prints what it was given."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.slurm.conf import slurm_conf_lines
from burstd.slurm.data_hooks import data_hook_script

POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.1}
GPU = {"name": "gpu", "provider": "local", "partition": "cloud-gpu", "node_prefix": "gpu", "node_count": 2,
       "instance_types": [{"name": "g", "cpus": 8, "memory_mb": 64000}], "price_per_hour": 3.0}
STAGING = {"store_bucket": "burstd-local", "store_endpoint": "http://10.80.0.1:6823"}


def _cfg(tmp_path, agent: dict | None = None, **pool_data):
    pools = [POOL | {"data": pool_data}, GPU]
    return parse_config({"pools": pools, "api": {"socket": str(tmp_path / "burstd.sock")}, "agent": agent or {}})


def _run(script: str, tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess:
    agent = tmp_path / "agent"
    agent.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n[ -z "$AWS_ACCESS_KEY_ID" ] || echo "key=$AWS_ACCESS_KEY_ID"\n')
    agent.chmod(0o755)
    path = tmp_path / "wrapper"
    path.write_text(script)
    path.chmod(0o755)
    return subprocess.run([str(path)], env={"PATH": os.environ["PATH"]} | env, capture_output=True, text=True,
                          check=False, timeout=10)


def test_no_pool_stages_data_no_prolog_line(tmp_path):
    lines = slurm_conf_lines(_cfg(tmp_path), release=(22, 5), hook_dir="/opt/hooks")
    assert not [x for x in lines if x.startswith(("Prolog=", "Epilog="))]
    with pytest.raises(ValueError, match="store_bucket"):
        data_hook_script(_cfg(tmp_path), "prolog")


def test_a_pool_that_stages_data_adds_prolog_and_epilog(tmp_path):
    cfg = _cfg(tmp_path, **STAGING)
    lines = slurm_conf_lines(cfg, release=(24, 11), hook_dir="/opt/hooks")
    assert "Prolog=/opt/hooks/burstd-prolog" in lines and "Epilog=/opt/hooks/burstd-epilog" in lines
    bed = slurm_conf_lines(cfg, release=(24, 11), data_hooks={"prolog": "/s/p", "epilog": "/s/e"})
    assert "Prolog=/s/p" in bed and "Epilog=/s/e" in bed


def test_the_prolog_stages_on_a_staging_pools_node_only(tmp_path):
    cfg = _cfg(tmp_path, **STAGING)
    script = data_hook_script(cfg, "prolog", agent=str(tmp_path / "agent"))
    ran = _run(script, tmp_path, {"SLURMD_NODENAME": "cloud3", "SLURM_JOB_ID": "42"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["stage-in", "--job", "42", "--daemon-url", f"unix:{tmp_path}/burstd.sock"]
    for node in ("onprem1", "gpu1", "cloud", "cloudy1", ""):  # on-prem, a pool that stages nothing, no node
        other = _run(script, tmp_path, {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "42"})
        assert other.returncode == 0 and other.stdout == "", node
    env = tmp_path / "agent.env"
    env.write_text(f"AWS_ACCESS_KEY_ID=AKIAFAKE\nPATH={tmp_path}/nowhere:$PATH\n")
    script = data_hook_script(cfg, "prolog", agent="agent", env_file=str(env))
    ran = _run(script, tmp_path, {"SLURMD_NODENAME": "cloud3", "SLURM_JOB_ID": "42", "PATH":
                                  f"{tmp_path}:{os.environ['PATH']}"})
    assert ran.returncode == 0 and ran.stdout.endswith("\nkey=AKIAFAKE\n"), ran.stderr  # the file's settings exported
    logged = data_hook_script(cfg, "prolog", agent=["sh", "-c", "echo oops >&2"], log_file=str(tmp_path / "h.log"))
    assert _run(logged, tmp_path, {"SLURMD_NODENAME": "cloud3", "SLURM_JOB_ID": "42"}).stderr == ""
    assert (tmp_path / "h.log").read_text().endswith(" prolog job 42\noops\n")  # what Slurm would discard
    bad = _run(script, tmp_path, {"SLURMD_NODENAME": "cloud3", "SLURM_JOB_ID": "4;2"})
    assert bad.returncode == 1 and bad.stdout == "" and "SLURM_JOB_ID" in bad.stderr


def test_the_epilog_names_the_nodes_token_and_ca_and_runs_nothing_from_hostile_paths(tmp_path):
    pwned = tmp_path / "pwned"
    agent = {"daemon_url": "https://head:8443", "daemon_token_file": f"/etc/b/$(touch {pwned})",
             "daemon_ca_file": f"/etc/it's;touch {pwned}"}
    script = data_hook_script(_cfg(tmp_path, agent, **STAGING), "epilog", agent=str(tmp_path / "agent"))
    ran = _run(script, tmp_path, {"SLURMD_NODENAME": "cloud1", "SLURM_JOB_ID": "7"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["stage-out", "--job", "7", "--daemon-url", "https://head:8443",
                                       "--token-file", agent["daemon_token_file"],
                                       "--ca-file", agent["daemon_ca_file"]]
    assert not pwned.exists()


def test_slurm_conf_install_hooks_writes_the_wrappers(tmp_path):
    conf = tmp_path / "burstd.toml"
    conf.write_text(f'[api]\nsocket = "{tmp_path}/b.sock"\n[[pools]]\nname = "p"\nprovider = "local"\n'
                    'partition = "cloud"\nnode_prefix = "c"\nnode_count = 1\nprice_per_hour = 0.1\n'
                    'instance_types = [{ name = "s", cpus = 1, memory_mb = 100 }]\n'
                    '[pools.data]\nstore_bucket = "burstd-p"\n')
    hooks = tmp_path / "hooks"
    res = CliRunner().invoke(app, ["slurm-conf", "-c", str(conf), "--slurm-release", "24.11", "--hook-dir",
                                   str(hooks), "--install-hooks"])
    assert res.exit_code == 0, res.output
    assert f"Prolog={hooks}/burstd-prolog" in res.stdout and f"Epilog={hooks}/burstd-epilog" in res.stdout
    for name, command in (("burstd-prolog", "stage-in"), ("burstd-epilog", "stage-out")):
        assert os.access(hooks / name, os.X_OK)
        assert f"exec burstd-agent {command} --job \"$SLURM_JOB_ID\"" in (hooks / name).read_text()
