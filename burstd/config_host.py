"""What the config names on this host: groups, the socket path, the state dir, token and TLS files.

    cfg = load_checked_config("/etc/burstd/burstd.toml")   # what `burstd` and `burstctl config check` run

The TOML model (``burstd.config``) checks shapes and bounds; this checks the host the daemon is about to run
on, so `config check` passes exactly the configs the daemon starts with. Every problem names file and key.
"""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

from burstd.config import Config, ConfigError, config_path, load_config


def _group_problem(key: str, name: str) -> str | None:
    try:
        grp.getgrnam(name)
    except KeyError:
        # the example config names groups a fresh host lacks: say how to fix it, either way
        return (f"{key}: no such group {name!r} on this host; create it (groupadd {name}) or name an existing "
                f"group (getent group lists them)")
    return None


def secret_file_problem(key: str, path: str | None, *, what: str = "token") -> str | None:
    """A secret the daemon reads: present, a regular file, not empty, and no one else may read it."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{key}: cannot read {path}: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{key}: {path} is not a regular file"
    if st.st_mode & 0o007:
        return f"{key}: {path} is readable or writable by every user (mode {stat.S_IMODE(st.st_mode):04o}); chmod 600"
    if st.st_size == 0 and what == "token":
        return f"{key}: {path} is empty"
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


def host_problems(cfg: Config) -> list[str]:
    problems: list[str | None] = [
        _group_problem("api.socket_group", cfg.api.socket_group),
        _group_problem("api.admin_group", cfg.api.admin_group),
    ]
    kind = _path_kind(cfg.api.socket)
    if kind not in (None, "socket"):
        problems.append(f"api.socket: {cfg.api.socket} is a {kind}, not a socket (burstd never removes it)")
    parent = os.path.dirname(cfg.api.socket) or "."
    if _path_kind(parent) not in (None, "directory"):
        problems.append(f"api.socket: {parent} is not a directory")
    kind = _path_kind(cfg.daemon.state_dir)
    if kind not in (None, "directory"):
        problems.append(f"daemon.state_dir: {cfg.daemon.state_dir} is a {kind}, not a directory")
    if cfg.database.url.startswith("sqlite:///"):
        db = cfg.database.url.removeprefix("sqlite:///")
        if db and db != ":memory:" and _path_kind(db) == "directory":
            problems.append(f"database.url: {db} is a directory")
    if cfg.api.tcp_listen:
        problems.append(secret_file_problem("api.token_file", cfg.api.token_file))
        problems.append(secret_file_problem("api.tls_key", cfg.api.tls_key, what="key"))
        if cfg.api.tls_cert and not Path(cfg.api.tls_cert).is_file():
            problems.append(f"api.tls_cert: {cfg.api.tls_cert} is not a readable file")
    return [p for p in problems if p]


def load_checked_config(path: str | os.PathLike | None = None) -> Config:
    """The config file, validated in full (model and host); raises ConfigError listing every problem."""
    cfg = load_config(path)
    problems = host_problems(cfg)
    if problems:
        raise ConfigError(str(config_path(path)), problems)
    return cfg
