"""Build the daemon's parts from the config: store, Slurm adapter, one provider per pool, decider."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from burstd.config import Config, PoolConfig
from burstd.daemon.logging import get_logger
from burstd.daemon.rules import first_rule
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


def make_decider(config: Config) -> tuple[Callable, str]:
    """``(decide, name)``: the full policy when configured/available, else the first rule."""
    choice = config.daemon.decider
    if choice in ("auto", "policy"):
        try:
            from burstd.policy.decide import decide  # type: ignore[import-not-found]

            return decide, "policy"
        except ImportError:
            if choice == "policy":
                raise
            log.info("burstd.policy not available: using the first bursting rule")
    return first_rule, "first-rule"
