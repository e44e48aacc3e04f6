"""AWS provider: EC2 Fleet ``instant`` spot launches (``pip install burstd[aws]``).

``config.py`` (the pool's ``[pools.aws]``) is read by every config load, so this package imports the provider,
and boto3 with it, only when a name of it is asked for."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burstd.providers.aws.provider import AwsProvider, build_fleet_request

__all__ = ["AwsProvider", "build_fleet_request"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from burstd.providers.aws import provider

        return getattr(provider, name)
    raise AttributeError(name)
