"""What the config names on this host: groups, the socket path, the state dir, token and TLS files.

Beyond "it exists and has the right kind": nothing burstd trusts may be planted or read by another user (the
rules are ``burstd.secure_files``): ``slurm.bin_dir`` and every directory above it (burstd runs squeue from it
as root), ``daemon.state_dir`` (where ``agent.key`` lives), the control socket's directory, and every secret
file named (``api.token_file``, ``api.tls_key``, ``slurm.rest_token_file``, ``agent.key``).

    cfg = load_checked_config("/etc/burstd/burstd.toml")   # what `burstd` and `burstctl config check` run

The TOML model (``burstd.config``) checks shapes and bounds; this checks the host the daemon is about to run
on, so `config check` passes exactly the configs the daemon starts with. Every problem names file and key.
"""

from __future__ import annotations

import grp
import ipaddress
import os
import stat
from pathlib import Path

from burstd.config import AwsPool, Config, ConfigError, LocalPoolConfig, config_path, load_config
from burstd.secure_files import secret_file_problem, trusted_dir_problem, trusted_file_problem


def _group_problem(key: str, name: str) -> str | None:
    try:
        grp.getgrnam(name)
    except KeyError:
        # the example config names groups a fresh host lacks: say how to fix it, either way
        return (f"{key}: no such group {name!r} on this host; create it (groupadd {name}) or name an existing "
                f"group (getent group lists them)")
    return None


def _path_kind(path: str) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror
    if stat.S_ISSOCK(st.st_mode):
        return "socket"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    return "file"


def _socket_dir_problem(socket_path: str) -> str | None:
    """The control socket's directory: a name there that another user can take first is a fake daemon the
    hooks would talk to (and a socket burstd refuses to replace)."""
    parent = os.path.dirname(os.path.abspath(socket_path))
    kind = _path_kind(parent)
    if kind not in (None, "directory"):
        return f"api.socket: {parent} is not a directory"
    try:
        if os.stat(parent).st_mode & stat.S_IWOTH:
            return (f"api.socket: {parent} is writable by every user: another user could create {socket_path} "
                    "first; put the socket in a directory only root may write (the unit's /run/burstd)")
    except FileNotFoundError:
        pass
    return trusted_dir_problem("api.socket", parent)


def _state_problems(cfg: Config) -> list[str | None]:
    state_dir = cfg.daemon.state_dir
    kind = _path_kind(state_dir)
    if kind not in (None, "directory"):
        return [f"daemon.state_dir: {state_dir} is a {kind}, not a directory"]
    problems = [trusted_dir_problem("daemon.state_dir", state_dir)]
    agent_key = os.path.join(state_dir, "agent.key")
    if _path_kind(agent_key) is not None:  # burstd makes it on first use; one that is there must be ours
        problems.append(secret_file_problem("daemon.state_dir", agent_key, what="key"))
    for i, pool in enumerate(cfg.pools):
        if pool.local and pool.local.records_dir:
            problems.append(trusted_dir_problem(f"pools[{i}].local.records_dir", pool.local.records_dir))
    return problems


def _local_networks_problem(cfg: Config) -> str | None:
    """Two local pools on one bridge or on overlapping subnets give two VMs one address. A host check, not a
    model rule: the simulator and the tests model many pools with provider "local" that never start a VM."""
    seen: list[tuple[str, ipaddress.IPv4Network, str]] = []
    for p in cfg.pools:
        if p.provider != "local":
            continue
        local = p.local or LocalPoolConfig()
        net = ipaddress.IPv4Network(local.subnet, strict=False)
        for name, other_net, other_bridge in seen:
            if local.bridge == other_bridge:
                return (f"pools: local pools {name!r} and {p.name!r} share bridge {local.bridge!r}; give each its "
                        "own bridge and subnet")
            if net.overlaps(other_net):
                return (f"pools: local pools {name!r} and {p.name!r} have overlapping subnets ({other_net} and "
                        f"{net}); give each its own")
        seen.append((p.name, net, local.bridge))
    return None


def _bridge_problem(i: int, bridge: str) -> str | None:
    """A local pool's bridge that exists on this host but is not a bridge (an ordinary interface)."""
    sys_dir = Path("/sys/class/net") / bridge
    if sys_dir.exists() and not (sys_dir / "bridge").is_dir():
        return f"pools[{i}].local.bridge: {bridge} is a network interface but not a bridge"
    return None


def _identity_certificate_problem(key: str, path: str) -> str | None:
    """AWS's certificate that node identities are verified with: whoever could swap it could enrol any instance."""
    problem = trusted_file_problem(key, path)
    if problem:
        return problem
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import rsa

    try:
        key_ = x509.load_pem_x509_certificate(Path(path).read_bytes()).public_key()
    except (OSError, ValueError) as exc:
        return f"{key}: {path} is not a PEM certificate ({exc}); take AWS's certificate for the pool's region"
    if not isinstance(key_, rsa.RSAPublicKey):
        return (f"{key}: {path} holds no RSA key; the base64 signature of an identity document is checked with "
                "AWS's RSA certificate for the region")
    return None


def host_problems(cfg: Config) -> list[str]:
    problems: list[str | None] = [
        _group_problem("api.socket_group", cfg.api.socket_group),
        _group_problem("api.admin_group", cfg.api.admin_group),
        # burstd runs squeue, scontrol and sacct from here as root: nobody else may plant one there
        trusted_dir_problem("slurm.bin_dir", cfg.slurm.bin_dir),
    ]
    if not cfg.pools:
        problems.append("pools: none configured, so burstd has nowhere to burst to; add a [[pools]] section "
                        "(name, provider, partition, node_prefix, node_count, price_per_hour, instance_types: "
                        "examples/burstd.toml has one of each provider)")
    kind = _path_kind(cfg.api.socket)
    if kind not in (None, "socket"):
        problems.append(f"api.socket: {cfg.api.socket} is a {kind}, not a socket (burstd never removes it)")
    problems.append(_socket_dir_problem(cfg.api.socket))
    problems += _state_problems(cfg)
    if cfg.database.url.startswith("sqlite:///"):
        db = cfg.database.url.removeprefix("sqlite:///")
        if db and db != ":memory:" and _path_kind(db) == "directory":
            problems.append(f"database.url: {db} is a directory")
    # every secret the daemon reads, whenever it is named (a group-readable admin token is refused even while
    # tcp_listen is off: the next edit turns it on)
    problems.append(secret_file_problem("api.token_file", cfg.api.token_file))
    problems.append(secret_file_problem("api.tls_key", cfg.api.tls_key, what="key"))
    if cfg.slurm.backend == "rest":
        problems.append(secret_file_problem("slurm.rest_token_file", cfg.slurm.rest_token_file))
    if cfg.api.tcp_listen and cfg.api.tls_cert and not Path(cfg.api.tls_cert).is_file():
        problems.append(f"api.tls_cert: {cfg.api.tls_cert} is not a readable file")
    problems.append(_local_networks_problem(cfg))
    for i, pool in enumerate(cfg.pools):
        if pool.local:
            problems.append(_bridge_problem(i, pool.local.bridge))
        if isinstance(pool, AwsPool) and pool.aws.identity_certificate:
            problems.append(_identity_certificate_problem(f"pools[{i}].aws.identity_certificate",
                                                          pool.aws.identity_certificate))
    return [p for p in problems if p]


def load_checked_config(path: str | os.PathLike | None = None) -> Config:
    """The config file, validated in full (model and host); raises ConfigError listing every problem."""
    cfg = load_config(path)
    problems = host_problems(cfg)
    if problems:
        raise ConfigError(str(config_path(path)), problems)
    return cfg
