"""Shared by the daemon's integration tests: a burstd config for the live bed, and a running daemon."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from burstd.config import load_config
from burstd.daemon.client import ApiClient
from burstd.daemon.runner import DaemonProcess, config_with


def bed_daemon_config(bed, directory: Path, **tables) -> Path:
    """The bed's burstd config (same socket the bed's hooks call), with a fresh database and state dir."""
    directory.mkdir(parents=True, exist_ok=True)
    base = Path(bed.burstd_config).read_text()
    settings = {
        "database": {"url": f"sqlite:///{directory}/burstd.db"},
        "daemon": {"state_dir": str(directory / "state"), "cycle_interval_s": 2, "orphan_grace_s": 10,
                   "launch_timeout_s": 60, "boot_timeout_s": 90, "log_format": "json"},
        "policy.waiting": {"kind": "constant", "min_wait_s": 3, "min_expected_wait_s": 0},
        "budget": {"default_account_usd": 100},
    }
    for name, keys in tables.items():
        settings.setdefault(name, {}).update(keys)
    path = directory / "burstd.toml"
    path.write_text(config_with(base, settings))
    return path


def world_readable_dir(prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)
    return d


def leases(config_path: Path, all_: bool = True) -> list[dict]:
    cfg = load_config(config_path)
    with ApiClient(cfg.api.socket) as api:
        return api.get("/v1/leases", all=all_ or None)


def cloud_namespaces(bed) -> set[str]:
    from burstd.providers.local import netns

    names = {f"{bed.netns_prefix}{node}" for node in bed.cloud_nodes}
    return netns.list_netns() & names


def cleanup_vms(config_path: Path) -> list[str]:
    """Terminate whatever VMs of this config's pools are left (a failed test must not leak into the next)."""
    from burstd.daemon.wiring import make_providers

    cfg = load_config(config_path)
    left = []
    for provider in make_providers(cfg).values():
        insts = [i for i in provider.list_instances() if not i.is_gone]
        if insts:
            provider.terminate([i.instance_id for i in insts])
            left += [i.node_name for i in insts]
    return left


@contextlib.contextmanager
def running_daemon(bed, config_path: Path, log_path: Path):
    d = DaemonProcess(config_path, log_path=log_path)
    with bed.hooks("burstd"):
        d.start()
        try:
            yield d
        finally:
            d.stop()
            cleanup_vms(config_path)


def wait_for(pred, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
