"""An AWS pool's own settings, ``[pools.aws]``: the provider's part of the config, beside the provider. The pool
(``burstd.config.AwsPool``) holds it; the provider (``provider.py``) reads it. Imports nothing of the provider (so
reading a config never needs boto3)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from burstd.config_types import Price, _Section


class AwsPoolConfig(_Section):
    region: str
    subnets: list[str] = Field(min_length=1)
    launch_template: str | None = None  # name or id of an existing template; None = burstd creates one
    image_id: str | None = None
    security_groups: list[str] = []
    instance_profile: str | None = None
    allocation_strategy: Literal["price-capacity-optimized", "lowest-price", "prioritized", "capacity-optimized"] = (
        "price-capacity-optimized"
    )
    munge_key_secret: str = "burstd/munge-key"  # Secrets Manager name (or ssm:/path for SSM)
    endpoint_url: str | None = None  # for tests (moto) or private endpoints
    conf_server: str | None = None  # slurmctld "host[:port]" the node's configless slurmd asks for its config
    spot_max_price: Price | None = None  # USD/hour; None = up to the on-demand price (AWS default)
    root_volume_gb: int | None = Field(default=None, ge=1, le=1_000_000)  # None = the image's own size
    launch_template_version: str = "$Latest"  # for a referenced launch_template
    # AWS's public certificate for the region (PEM, from AWS's documentation): a node proves which instance it
    # is with its signed identity document and gets its agent token (POST /v1/enroll); None = no AWS enrolment
    identity_certificate: str | None = None

    @model_validator(mode="after")
    def _bootable(self) -> AwsPoolConfig:
        # a VM that cannot boot into Slurm is paid for and never joins: refuse such a pool up front
        if not self.launch_template and not self.image_id:
            raise ValueError("needs launch_template (an existing template) or image_id (burstd makes one)")
        if self.image_id and not self.launch_template and not self.conf_server:
            raise ValueError("image_id needs conf_server (slurmctld host[:port] the node's configless slurmd asks)")
        return self
