"""GCP provider: Compute Engine ``bulkInsert`` spot launches (``pip install burstd[gcp]``)."""

from burstd.providers.gcp.provider import GcpProvider, build_bulk_insert, request_id

__all__ = ["GcpProvider", "build_bulk_insert", "request_id"]
