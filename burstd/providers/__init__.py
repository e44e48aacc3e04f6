"""Cloud providers behind one small interface (``burstd.providers.base.Provider``).

A new cloud touches one folder, ``burstd/providers/<name>/`` (its ``config.py`` section and its provider), one
line in ``make_provider`` and its pool class in ``burstd.config.POOL_KINDS`` (docs/clouds.md, "Adding a cloud").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from burstd.config import Config, PoolConfig
    from burstd.providers.base import Provider
    from burstd.providers.offerings import OfferingCooldown


def make_provider(pool: PoolConfig, config: Config, *, cooldown: OfferingCooldown | None = None) -> Provider:
    """Build the provider for one pool. Imports lazily: the aws/gcp extras are optional.

    ``cooldown``: the capacity cooldown cache shared by the cloud pools (one per daemon); a private one if None.
    """
    if pool.provider == "local":
        from burstd.providers.local.preemption import PreemptionHook
        from burstd.providers.local.provider import LocalProvider

        # each VM gets its metadata endpoint and burstd-agent (and random preemptions when configured)
        hooks = [PreemptionHook(config, pool)] if (pool.local is None or pool.local.vm_agent) else []
        return LocalProvider.from_config(config, pool.name, hooks=hooks)
    if pool.provider == "aws":
        from burstd.providers.aws.provider import AwsProvider

        return AwsProvider(pool, config.cluster.id, config.cloud, cooldown)
    if pool.provider == "gcp":
        from burstd.providers.gcp.provider import GcpProvider

        return GcpProvider(pool, config.cluster.id, config.cloud, cooldown)
    raise ValueError(f"unknown provider {pool.provider!r}")
