"""A GCP pool's own settings, ``[pools.gcp]``: the provider's part of the config, beside the provider. The pool
(``burstd.config.GcpPool``) holds it; the provider (``provider.py``) reads it. Imports nothing of the provider (so
reading a config never needs the Google client libraries)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from burstd.config_types import _Section


class GcpPoolConfig(_Section):
    project: str
    region: str
    zones: list[str] = Field(min_length=1)
    instance_template: str | None = None
    machine_image: str | None = None
    network: str = "global/networks/default"
    subnetwork: str | None = None
    termination_action: Literal["DELETE", "STOP"] = "DELETE"
    munge_key_secret: str = "burstd-munge-key"  # Secret Manager secret id
    api_endpoint: str | None = None  # for tests or private endpoints
    conf_server: str | None = None  # slurmctld "host[:port]" the node's configless slurmd asks for its config
    image: str = "projects/debian-cloud/global/images/family/debian-12"  # boot disk source image
    boot_disk_gb: int = Field(default=20, ge=10, le=1_000_000)
    service_account: str | None = None  # email; None = the project's default compute service account
    anonymous_credentials: bool = False  # tests against a fake endpoint only: send no credentials
    # Google's certificates for instance identity tokens (a node's proof for POST /v1/enroll; needs api.node_url)
    identity_certs_url: str = "https://www.googleapis.com/oauth2/v1/certs"
