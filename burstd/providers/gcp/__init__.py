"""GCP provider: Compute Engine ``bulkInsert`` spot launches (``pip install burstd[gcp]``)."""

from burstd.providers.gcp.provider import (
    GcpProvider,
    build_bulk_insert,
    build_gang_bulk_insert,
    instance_name,
    request_id,
)

__all__ = ["GcpProvider", "build_bulk_insert", "build_gang_bulk_insert", "instance_name", "request_id"]
