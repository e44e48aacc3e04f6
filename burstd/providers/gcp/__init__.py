"""GCP provider: Compute Engine ``bulkInsert`` spot launches (``pip install burstd[gcp]``).

``config.py`` (the pool's ``[pools.gcp]``) is read by every config load, so this package imports the provider,
and the Google client libraries with it, only when a name of it is asked for."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burstd.providers.gcp.provider import (
        GcpProvider, build_bulk_insert, build_gang_bulk_insert, instance_name, request_id,
    )

__all__ = ["GcpProvider", "build_bulk_insert", "build_gang_bulk_insert", "instance_name", "request_id"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from burstd.providers.gcp import provider

        return getattr(provider, name)
    raise AttributeError(name)
