"""`burstctl config check` and the daemon's start run one validation (model bounds + host checks): every config
the issue-9 probe found crashing the daemon or the hooks is refused by both, with a message naming file and key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config_host import load_checked_config
from burstd.daemon import main as daemon_main
from burstd.daemon.hooks import _settings

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
AWS_POOL = """
[[pools]]
name = "a1"
provider = "aws"
partition = "cloud"
node_prefix = "cloud"
node_count = 4
price_per_hour = 0.5
instance_types = [{ name = "m5.large", cpus = 2, memory_mb = 8000 }]
[pools.aws]
region = "us-east-1"
subnets = ["subnet-1"]
"""


def _base(tmp: Path) -> str:
    return f'[api]\nsocket = "{tmp}/run/burstd.sock"\n[daemon]\nstate_dir = "{tmp}/state"\n'


def _tls(tmp: Path, token: str | None = "s3cret\n", mode: int = 0o600) -> str:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    cert.write_text("cert")
    key.write_text("key")
    key.chmod(0o600)
    tok = tmp / "token"
    if token is not None:
        tok.write_text(token)
        tok.chmod(mode)
    return f'tcp_listen = "127.0.0.1:8787"\ntoken_file = "{tok}"\ntls_cert = "{cert}"\ntls_key = "{key}"\n'


def _with_api(tmp: Path, extra: str) -> str:
    return _base(tmp).replace("[daemon]", extra + "[daemon]")


def _with_daemon(tmp: Path, extra: str) -> str:
    return _base(tmp) + extra


def _state_dir_file(tmp: Path) -> str:
    (tmp / "state").write_text("")
    return _base(tmp)


def _socket_dir(tmp: Path) -> str:
    (tmp / "run" / "burstd.sock").mkdir(parents=True)
    return _base(tmp)


NOBODY = 65534  # another user (the suite runs as root, as the daemon does)


def _with_slurm(tmp: Path, extra: str) -> str:
    return _base(tmp) + "[slurm]\n" + extra + POOL


def _bin_dir(tmp: Path, mode: int = 0o755, owner: int = 0, parent_mode: int = 0o755) -> str:
    """Issue 21 item 7: a planted squeue ran as root from a bin_dir another user could write."""
    parent = tmp / "opt"
    (parent / "bin").mkdir(parents=True)
    (parent / "bin").chmod(mode)
    parent.chmod(parent_mode)
    os.chown(parent / "bin", owner, owner)
    return _with_slurm(tmp, f'bin_dir = "{parent / "bin"}"\n')


def _state_dir(tmp: Path, mode: int) -> str:
    (tmp / "state").mkdir()
    (tmp / "state").chmod(mode)
    return _base(tmp) + POOL


def _premade_agent_key(tmp: Path) -> str:
    """A user's agent.key, pre-made (0600, their own) where the daemon would make it: they know every token."""
    (tmp / "state").mkdir()
    key = tmp / "state" / "agent.key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    os.chown(key, NOBODY, NOBODY)
    return _base(tmp) + POOL


def _socket_in(tmp: Path, mode: int) -> str:
    (tmp / "run").mkdir()
    (tmp / "run").chmod(mode)
    return _base(tmp) + POOL


def _local_pools(tmp: Path, second: str) -> str:
    first = POOL + '[pools.local]\nsubnet = "10.77.0.0/24"\nbridge = "br-a"\n'
    other = POOL.replace('"p1"', '"p2"').replace('node_prefix = "cloud"', 'node_prefix = "burst"')
    return _base(tmp) + first + other + "[pools.local]\n" + second


def _identity_cert(tmp: Path, *, pem: bytes | None = None, mode: int = 0o644) -> str:
    """An AWS pool that verifies node identities with the certificate in ``tmp/aws.pem``."""
    from tests.fakes.instance_identity import AwsIdentity

    cert = tmp / "aws.pem"
    cert.write_bytes(AwsIdentity().cert_pem if pem is None else pem)
    cert.chmod(mode)
    return (_base(tmp) + AWS_POOL + 'launch_template = "lt"\n'
            + f'identity_certificate = "{cert}"\n')


CASES = {
    "cycle interval 1e12": (lambda t: _with_daemon(t, "cycle_interval_s = 1e12\n"), "daemon.cycle_interval_s"),
    "hook timeout 1e10": (lambda t: _with_daemon(t, "hook_timeout_s = 1e10\n"), "daemon.hook_timeout_s"),
    "missing socket group": (lambda t: _with_api(t, 'socket_group = "no-such-group-x"\n'), "api.socket_group"),
    "bad tcp_listen": (lambda t: _with_api(t, _tls(t).replace("127.0.0.1:8787", "localhost:99999")), "api.tcp_listen"),
    "tcp_listen without TLS": (lambda t: _with_api(t, 'tcp_listen = "127.0.0.1:8787"\ntoken_file = "/x"\n'),
                               "tls_cert and tls_key"),
    "missing token file": (lambda t: _with_api(t, _tls(t, token=None)), "api.token_file"),
    "empty token file": (lambda t: _with_api(t, _tls(t, token="")), "api.token_file"),
    "world-readable token file": (lambda t: _with_api(t, _tls(t, mode=0o644)), "api.token_file"),
    "unknown database scheme": (lambda t: _base(t) + '[database]\nurl = "mysql://db/burstd"\n', "database.url"),
    "bogus metrics_address": (lambda t: _with_daemon(t, 'metrics_address = "not an address"\n'),
                              "daemon.metrics_address"),
    "state_dir is a file": (_state_dir_file, "daemon.state_dir"),
    "socket path is a directory": (_socket_dir, "api.socket"),
    "overlapping node prefixes": (lambda t: _base(t) + POOL.replace("node_count = 4", "node_count = 20") + POOL.replace('"p1"', '"p2"').replace(
        'node_prefix = "cloud"', 'node_prefix = "cloud1"').replace('"cloud"\nnode_prefix', '"cloud2"\nnode_prefix'),
        "is in pool 'p1' and in pool 'p2'"),
    "feature with a newline": (lambda t: _base(t) + POOL.replace("price_per_hour", 'features = ["a\\nResumeProgram=/tmp/x"]\nprice_per_hour'),
                               "pools[0].features[0]"),
    "aws image_id without conf_server": (lambda t: _base(t) + AWS_POOL + 'image_id = "ami-1"\n', "image_id needs conf_server"),
    "aws without template or image": (lambda t: _base(t) + AWS_POOL, "needs launch_template"),
    "accrual interval of a year": (lambda t: _base(t) + "[budget]\naccrual_interval_s = 31536000\n", "budget.accrual_interval_s"),
    "infinite price": (lambda t: _base(t) + POOL.replace("0.5", "inf"), "pools[0].price_per_hour"),
    "TOML nested 500 deep": (lambda t: "x = " + "[" * 500 + "]" * 500 + "\n", "nested too deeply"),
    # issue 21 item 7: files another user could plant or read
    "world-writable bin_dir": (lambda t: _bin_dir(t, mode=0o777), "slurm.bin_dir"),
    "bin_dir owned by a user": (lambda t: _bin_dir(t, owner=NOBODY), "slurm.bin_dir"),
    "bin_dir under a world-writable parent": (lambda t: _bin_dir(t, parent_mode=0o777), "slurm.bin_dir"),
    "world-writable state_dir": (lambda t: _state_dir(t, 0o777), "daemon.state_dir"),
    "sticky world-writable state_dir": (lambda t: _state_dir(t, 0o1777), "daemon.state_dir"),
    "a user's pre-made agent.key": (_premade_agent_key, "agent.key is owned by uid 65534"),
    "group-readable token file": (lambda t: _with_api(t, _tls(t, mode=0o640)), "api.token_file"),
    "group-readable token file, tcp off": (
        lambda t: _with_api(t, _tls(t, mode=0o640).replace('tcp_listen = "127.0.0.1:8787"\n', "")) + POOL,
        "api.token_file"),
    "socket in a world-writable dir": (lambda t: _socket_in(t, 0o1777), "api.socket"),
    # issue 21 item 9: configs the daemon would start with and regret
    "an empty file": (lambda t: "", "pools: none configured"),
    "agent reporting over plain http": (lambda t: _base(t) + POOL + '[agent]\ndaemon_url = "http://head:8787"\n',
                                        "agent.daemon_url: 'http://head:8787': TLS required"),
    "standby over plain http": (lambda t: _base(t) + POOL + '[agent]\nstandby_daemon_urls = ["http://b:1"]\n',
                                "agent.standby_daemon_urls"),
    "a price of 1e-300": (lambda t: _base(t) + POOL.replace("0.5", "1e-300"), "pools[0].price_per_hour"),
    "a zero price": (lambda t: _base(t) + POOL.replace("0.5", "0"), "pools[0].price_per_hour"),
    "an instance type at 1e-300": (lambda t: _base(t) + POOL.replace("memory_mb = 1000", "memory_mb = 1000, "
                                                                     "price_per_hour = 1e-300"),
                                   "pools[0].instance_types[0].price_per_hour"),
    "two local pools on one subnet": (lambda t: _local_pools(t, 'subnet = "10.77.0.128/25"\nbridge = "br-b"\n'),
                                      "overlapping subnets"),
    "two local pools on one bridge": (lambda t: _local_pools(t, 'subnet = "10.78.0.0/24"\nbridge = "br-a"\n'),
                                      "share bridge 'br-a'"),
    "bridge lo": (lambda t: _base(t) + POOL + '[pools.local]\nbridge = "lo"\n', "pools[0].local.bridge"),
    # a node's identity is verified with it: whoever may change it could enrol any instance
    "group-writable AWS identity certificate": (lambda t: _identity_cert(t, mode=0o664),
                                                "pools[0].aws.identity_certificate: "),
    "AWS identity certificate that is none": (lambda t: _identity_cert(t, pem=b"hello"), "is not a PEM certificate"),
    "node_url over plain http": (lambda t: _with_api(t, 'node_url = "http://head:8787"\n') + POOL, "api.node_url"),
    "empty opt_out_comment": (lambda t: _base(t) + POOL + '[policy]\nopt_out_comment = ""\n',
                              "policy.opt_out_comment: must not be empty"),
}


@pytest.fixture(params=sorted(CASES))
def bad_config(request, tmp_path):
    make, key = CASES[request.param]
    path = tmp_path / "burstd.toml"
    path.write_text(make(tmp_path))
    return path, key


def test_config_check_refuses_each_bad_config_naming_file_and_key(bad_config):
    path, key = bad_config
    res = CliRunner().invoke(app, ["config", "check", str(path)])
    assert res.exit_code == 2
    assert f"{path}: " in res.stderr and key in res.stderr


def test_the_daemon_refuses_the_same_configs_at_start_with_the_same_message(bad_config, capsys):
    path, key = bad_config
    assert daemon_main.main(["--config", str(path), "--once"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and key in err


def test_file_only_skips_the_host_but_not_the_bounds(tmp_path):
    path = tmp_path / "burstd.toml"
    path.write_text(_with_api(tmp_path, 'socket_group = "no-such-group-x"\n'))
    assert CliRunner().invoke(app, ["config", "check", "--file-only", str(path)]).exit_code == 0
    path.write_text(_with_daemon(tmp_path, "cycle_interval_s = 1e12\n"))
    assert CliRunner().invoke(app, ["config", "check", "--file-only", str(path)]).exit_code == 2


def test_a_sane_config_passes_both(tmp_path):
    path = tmp_path / "burstd.toml"
    path.write_text(_with_api(tmp_path, _tls(tmp_path)) + POOL)
    assert load_checked_config(path).api.tcp_listen == "127.0.0.1:8787"
    assert CliRunner().invoke(app, ["config", "check", str(path)]).exit_code == 0
    path.write_text(_identity_cert(tmp_path))  # a public certificate may be world-readable
    assert CliRunner().invoke(app, ["config", "check", str(path)]).exit_code == 0


@pytest.mark.parametrize("text, key", [
    ("[daemon]\nhook_timeout_s = 1e10\n", "daemon.hook_timeout_s"),
    ("daemon = 3\n", "daemon.hook_timeout_s"),
    ("api = 'x'\n", "api.socket"),
    ("x = " + "[" * 500 + "]" * 500 + "\n", "RecursionError"),
])
def test_the_hooks_refuse_a_config_they_cannot_use_with_a_clear_error(tmp_path, monkeypatch, text, key):
    path = tmp_path / "burstd.toml"
    path.write_text(text)
    monkeypatch.setenv("BURSTD_CONFIG", str(path))
    monkeypatch.delenv("BURSTD_SOCKET", raising=False)
    with pytest.raises(ValueError, match=key):
        _settings()


def test_a_socket_group_member_file_mode_is_not_required_for_other_checks(tmp_path):
    # the host checks look at what exists: a fresh host (no state dir, no socket yet) is fine
    path = tmp_path / "burstd.toml"
    path.write_text(_base(tmp_path) + POOL)
    assert not os.path.exists(tmp_path / "state")
    assert load_checked_config(path).daemon.state_dir == f"{tmp_path}/state"


REPO = Path(__file__).resolve().parents[2]


def test_the_example_config_passes_on_a_fresh_host_after_the_guides_install_steps(monkeypatch):
    """Issue 26: examples/burstd.toml failed `config check` until groups existed that the guide never
    mentioned. The guide's install steps create exactly the groups the example names, and then it passes; a
    host without them gets a message that says how to fix it."""
    import grp
    import re
    import shlex

    import tomllib

    guide = (REPO / "docs" / "admin-guide.md").read_text()
    install = guide[guide.index("## 1. Install on the head node"):guide.index("## 2.")]
    steps = install[:install.index("burstctl config check")]
    created = {shlex.split(cmd)[-1] for cmd in re.findall(r"groupadd -f \w[\w-]*", steps)}
    example = REPO / "examples" / "burstd.toml"
    api = tomllib.loads(example.read_text())["api"]
    assert created == {api["socket_group"], api["admin_group"]}

    real = grp.getgrnam
    on_this_host: set[str] = set()

    def getgrnam(name):
        if name in on_this_host:
            return real("root")
        raise KeyError(name)

    monkeypatch.setattr(grp, "getgrnam", getgrnam)
    res = CliRunner().invoke(app, ["config", "check", str(example)])
    assert res.exit_code == 2
    for key in ("socket_group", "admin_group"):
        assert f"api.{key}: no such group {api[key]!r} on this host; create it (groupadd {api[key]})" in res.stderr
    on_this_host |= created  # what the guide's groupadd lines did
    res = CliRunner().invoke(app, ["config", "check", str(example)])
    assert res.exit_code == 0, res.stderr
