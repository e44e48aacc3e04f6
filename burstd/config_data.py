"""The data sections of burstd's configuration: each pool's link and data prices (``[pools.data]``) and the
site-wide rules for data that never leaves (``[data]``). What ``burstd.policy.data_cost`` reads; docs/policy.md.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from burstd.config_types import Name, Usd, _Section

# link speed in megabits per second: 1 kbit/s at least (a 0 or 1e-9 link is a typo that keeps every job home)
Mbps = Annotated[float, Field(ge=0.001, le=10_000_000, allow_inf_nan=False)]
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ENDPOINT = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?")
Gigabytes = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]


class PoolDataConfig(_Section):
    """A pool's link to the site and what moving and keeping data there costs (USD per GB = 10^9 bytes)."""

    link_mbps: Mbps | None = None  # usable bandwidth between the site and the pool; None = not metered
    transfer_in_per_gb: Usd = 0.0  # site -> pool (ingress; often free, or a site egress charge)
    transfer_out_per_gb: Usd = 0.0  # pool -> site (the cloud's egress: typically $0.02-0.12)
    storage_per_gb_month: Usd = 0.0  # storage kept near the pool (staged inputs, the cache)
    cache_gb: Gigabytes = 0.0  # storage near the pool the cache may hold; 0 = no cache
    # the object store near the pool that burst jobs' declared inputs are staged to (docs/data.md); no bucket = the
    # pool stages nothing (a job that declares data still bursts, its inputs are not moved)
    store_bucket: str | None = None
    store_endpoint: str | None = None  # http(s) URL; None = the cloud's own endpoint for store_region
    store_region: str | None = None

    @field_validator("store_bucket")
    @classmethod
    def _bucket_name(cls, bucket: str | None) -> str | None:
        if bucket is not None and not _BUCKET.fullmatch(bucket):
            raise ValueError(f"{bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -, starting and ending with "
                             "a letter or digit)")
        return bucket

    @field_validator("store_endpoint")
    @classmethod
    def _endpoint_url(cls, url: str | None) -> str | None:
        if url is not None and not _ENDPOINT.fullmatch(url):
            raise ValueError(f"{url!r} is not an http(s) URL of the store (http://host:port)")
        return url

    @model_validator(mode="after")
    def _store_needs_bucket(self) -> PoolDataConfig:
        if self.store_bucket is None and (self.store_endpoint or self.store_region):
            raise ValueError("store_endpoint/store_region given without store_bucket: name the pool's bucket")
        return self


class DataConfig(_Section):
    """Site-wide: data under these paths, and every job of these accounts, never leaves the site."""

    never_leave_paths: list[str] = []
    never_leave_accounts: list[Name] = []
    # the Python (with burstd) the daemon brings outputs home with, run as the job's user; None = its own
    # interpreter, started as root with --as-user: it loads, then takes the user's ids before touching a file
    user_python: str | None = None

    @field_validator("user_python")
    @classmethod
    def _absolute_python(cls, path: str | None) -> str | None:
        if path is not None and (not path.startswith("/") or any(ord(c) < 32 for c in path)):
            raise ValueError(f"{path!r} is not an absolute path")
        return path

    @field_validator("never_leave_paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for p in paths:
            if not p.startswith("/") or any(ord(c) < 32 for c in p):
                raise ValueError(f"{p!r} is not an absolute path")
        return paths
