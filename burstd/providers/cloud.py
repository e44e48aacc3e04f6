"""Build the cloud providers of a config (aws, gcp); one shared cooldown cache for all of them.

    cooldown = OfferingCooldown(config.cloud.capacity_cooldown_s)
    providers = cloud_providers(config, cooldown)      # {pool name: provider}, aws and gcp pools only

The local provider is built by its own module; the daemon merges both maps.
"""

from __future__ import annotations

from burstd.config import Config, PoolConfig
from burstd.providers.base import ErrorKind, Provider, ProviderError
from burstd.providers.offerings import OfferingCooldown


def cloud_provider(pool: PoolConfig, config: Config, cooldown: OfferingCooldown | None = None) -> Provider:
    if pool.provider == "aws":
        try:
            from burstd.providers.aws import AwsProvider
        except ImportError as exc:
            raise ProviderError(ErrorKind.CONFIG, f"pool {pool.name}: install burstd[aws] ({exc})") from None
        return AwsProvider(pool, config.cluster.id, config.cloud, cooldown)
    if pool.provider == "gcp":
        try:
            from burstd.providers.gcp import GcpProvider
        except ImportError as exc:
            raise ProviderError(ErrorKind.CONFIG, f"pool {pool.name}: install burstd[gcp] ({exc})") from None
        return GcpProvider(pool, config.cluster.id, config.cloud, cooldown)
    raise ValueError(f"pool {pool.name}: provider {pool.provider!r} is not a cloud provider")


def cloud_providers(config: Config, cooldown: OfferingCooldown | None = None) -> dict[str, Provider]:
    cooldown = cooldown if cooldown is not None else OfferingCooldown(config.cloud.capacity_cooldown_s)
    return {p.name: cloud_provider(p, config, cooldown) for p in config.pools if p.provider in ("aws", "gcp")}
