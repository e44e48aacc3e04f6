"""Build the daemon's parts from the config: store, Slurm adapter, one provider per pool."""

from __future__ import annotations

import importlib

from burstd.config import Config, PoolConfig
from burstd.daemon.logging import get_logger
from burstd.providers.base import Provider

log = get_logger("wiring")


def open_store(config: Config):
    from burstd.db.store import Store

    return Store.open(config.database.url)


def make_slurm_adapter(config: Config):
    from burstd.slurm import make_adapter

    return make_adapter(config.slurm)


def make_provider(pool: PoolConfig, config: Config, cooldown=None) -> Provider:
    """The pool's provider, through ``burstd.providers.make_provider`` (the local one gets the per-VM
    metadata endpoint and burstd-agent there). ``cooldown``: the daemon's one ``OfferingCooldown`` shared by
    the cloud pools (``PoolHealth.cooldown``, persisted in the store)."""
    providers = importlib.import_module("burstd.providers")
    if pool.provider == "local" or cooldown is None:
        return providers.make_provider(pool, config)
    return providers.make_provider(pool, config, cooldown=cooldown)


def make_providers(config: Config, cooldown=None) -> dict[str, Provider]:
    return {pool.name: make_provider(pool, config, cooldown) for pool in config.pools}
