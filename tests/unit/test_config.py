"""Config: a valid file parses; every problem names the file and the key path; nothing partial is returned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from burstd.config import ConfigError, load_config, parse_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "burstd.toml"

POOL = """
[[pools]]
name = "p1"
provider = "local"
partition = "cloud"
node_prefix = "cloud"
node_count = 4
price_per_hour = 0.5
instance_types = [{ name = "small", cpus = 2, memory_mb = 1000 }]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "burstd.toml"
    p.write_text(text)
    return p


def test_example_config_is_valid():
    cfg = load_config(EXAMPLE)
    assert cfg.cluster.id == "hpc-east"
    assert cfg.pool("aws-spot").aws.region == "us-east-1"
    assert cfg.budget.accounts == {"chem": 5000, "physics": 2500}


def test_each_pool_is_the_class_of_its_provider_holding_its_provider_s_own_section():
    from burstd.config import AwsPool, LocalPool
    from burstd.providers.aws.config import AwsPoolConfig

    cfg = load_config(EXAMPLE)
    aws = cfg.pool("aws-spot")
    assert isinstance(aws, AwsPool) and isinstance(aws.aws, AwsPoolConfig)
    assert all(isinstance(p, LocalPool) for p in cfg.pools if p.provider == "local")
    again = parse_config(cfg.model_dump())  # a dumped config reads back into the same classes
    assert [type(p) for p in again.pools] == [type(p) for p in cfg.pools]


def test_defaults_apply_to_an_empty_file(tmp_path):
    cfg = load_config(write(tmp_path, ""))
    assert cfg.slurm.backend == "cli"
    assert cfg.database.url.startswith("sqlite:")
    assert cfg.pools == []


def test_pool_node_names_and_lookup(tmp_path):
    cfg = load_config(write(tmp_path, POOL))
    assert cfg.pool("p1").node_names == ["cloud1", "cloud2", "cloud3", "cloud4"]
    assert cfg.pool_of_node("cloud3").name == "p1"
    assert cfg.pool_of_node("cloud5") is None  # beyond node_count
    assert cfg.pool_of_node("cloudx") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[slurm]\nbackend = 'sbatch'\n", "slurm.backend: Input should be 'cli', 'rest' or 'pyslurm'"),
        ("[slurm]\nbakend = 'cli'\n", "slurm.bakend: Extra inputs are not permitted"),
        (POOL.replace("price_per_hour = 0.5", "price_per_hour = -1"), "pools[0].price_per_hour: Input should be greater than or equal to 0"),
        (POOL.replace("price_per_hour = 0.5", "price_per_hour = nan"), "pools[0].price_per_hour: Input should be a finite number"),
        (POOL.replace("cpus = 2", "cpus = 0"), "pools[0].instance_types[0].cpus: Input should be greater than or equal to 1"),
        (POOL.replace('provider = "local"', 'provider = "aws"'), "pools[0]: provider = 'aws' needs a [pools.aws] section"),
        (POOL.replace('provider = "local"', 'provider = "azure"'), "pools[0].provider: Input should be 'local', 'aws' or 'gcp'"),
        (POOL + '[pools.gcp]\nproject = "p"\n', "pools[0]: section [pools.gcp] does not match provider"),
        (POOL + '[pools.local]\nbridge = "lo"\n', "pools[0].local.bridge: 'lo' is the loopback"),
        (POOL + POOL, "pools: name must be unique, repeated: p1"),
        ("[budget]\naccounts = { chem = -5 }\n", "budget.accounts.chem: Input should be greater than or equal to 0"),
        ("[api]\ntcp_listen = '127.0.0.1:8787'\n", "api: tcp_listen needs token_file"),
        ("[policy]\nburst_to = { batch = ['nope'] }\n", "policy.burst_to.batch: unknown pool(s) nope"),
        (POOL.replace('node_prefix = "cloud"', 'node_prefix = "Cloud;rm"'), "pools[0].node_prefix: String should match pattern"),
    ],
)
def test_each_problem_names_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert f"{path}: " in message
    assert expected in message


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as info:
        parse_config({"slurm": {"backend": "x", "command_timeout_s": -1}, "daemon": {"cycle_interval_s": 0}}, "f.toml")
    keys = {p.split(":")[0] for p in info.value.problems}
    assert keys == {"slurm.backend", "slurm.command_timeout_s", "daemon.cycle_interval_s"}


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"not valid TOML: .*line 1"):
        load_config(write(tmp_path, "[slurm\nbackend = 1\n"))


def test_env_variable_selects_file(tmp_path, monkeypatch):
    monkeypatch.setenv("BURSTD_CONFIG", str(write(tmp_path, "[cluster]\nid = 'from-env'\n")))
    assert load_config().cluster.id == "from-env"


def test_burstctl_config_check_exit_codes(tmp_path):
    good = subprocess.run([sys.executable, "-m", "burstd.cli.app", "config", "check", str(EXAMPLE), "--json",
                           "--file-only"],  # its groups (hpc, hpcadmin) are not on this host
                          capture_output=True, text=True, cwd=REPO)
    assert good.returncode == 0, good.stderr
    assert '"id": "hpc-east"' in good.stdout
    bad = write(tmp_path, "[slurm]\nbackend = 'x'\n[daemon]\nlaunch_timeout_s = -3\n")
    res = subprocess.run([sys.executable, "-m", "burstd.cli.app", "config", "check", str(bad)],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 2 and all(l.startswith(f"{bad}: ") for l in lines)


def test_ha_needs_postgresql_and_a_renewal_well_inside_the_lease():
    with pytest.raises(ConfigError) as err:
        parse_config({"ha": {"enabled": True}})
    assert "ha.enabled: high availability needs a PostgreSQL database.url" in str(err.value)
    with pytest.raises(ConfigError, match="renew_interval_s .* at most half of lease_s"):
        parse_config({"ha": {"enabled": True, "lease_s": 4, "renew_interval_s": 3},
                      "database": {"url": "postgresql+psycopg2://burstd@/burstd"}})
    cfg = parse_config({"ha": {"enabled": True}, "database": {"url": "postgresql+psycopg2://burstd@/burstd"}})
    assert cfg.ha.lease_s + cfg.ha.renew_interval_s < 30  # the failover target
    assert not parse_config({}).ha.enabled  # SQLite, one daemon: the default
AWS_POOL = """
[[pools]]
name = "aws-spot"
provider = "aws"
partition = "cloud-aws"
node_prefix = "aws"
node_count = 4
price_per_hour = 0.1
instance_types = [{ name = "m5.large", cpus = 2, memory_mb = 7000 }]
"""


@pytest.mark.parametrize("cloud,section", [("aws", 'region = "us-east-1"\nsubnets = ["subnet-1"]\nlaunch_template = "lt-1"'),
                                           ("gcp", 'project = "p"\nregion = "r"\nzones = ["r-a"]')])
def test_ondemand_fallback_is_one_pool_setting_and_the_old_per_cloud_key_still_reads_with_a_warning(
        tmp_path, cloud, section):
    pool = AWS_POOL.replace('provider = "aws"', f'provider = "{cloud}"')
    new = load_config(write(tmp_path, pool + f"ondemand_fallback = true\n[pools.{cloud}]\n{section}\n"))
    assert new.pools[0].ondemand_fallback is True
    assert load_config(write(tmp_path, pool + f"[pools.{cloud}]\n{section}\n")).pools[0].ondemand_fallback is False
    # the old key: same effect, and a warning that names the new one
    with pytest.warns(FutureWarning, match=rf"\[pools.{cloud}\] ondemand_fallback is deprecated; write "
                                           r"ondemand_fallback in the pool itself"):
        old = load_config(write(tmp_path, pool + f"[pools.{cloud}]\n{section}\nondemand_fallback = true\n"))
    assert old.pools[0].ondemand_fallback is True and "ondemand_fallback" not in old.pools[0].model_dump()[cloud]
    # both, disagreeing: an error naming the key to keep
    with pytest.raises(ConfigError, match=rf"{cloud}.ondemand_fallback is deprecated and disagrees with "
                                          r"ondemand_fallback: set only the pool's ondemand_fallback"):
        load_config(write(tmp_path, pool + f"ondemand_fallback = false\n[pools.{cloud}]\n{section}\n"
                                           "ondemand_fallback = true\n"))
