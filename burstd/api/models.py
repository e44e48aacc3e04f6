"""The control API's request bodies and bounded query parameters: what a caller may send, checked before a route
runs (422 naming the field, never echoing the input)."""

from __future__ import annotations

from typing import Literal

from fastapi import Query
from pydantic import BaseModel, Field, field_validator

from burstd.domain.jobref import MAX_JOB_ID
from burstd.slurm.base import check_reason

SINCE = Query(None, ge=0, le=4_102_444_800, allow_inf_nan=False, description="Unix time")
# its own Query object: with SINCE shared by both parameters, ?until answered with the value of ?since
UNTIL = Query(None, ge=0, le=4_102_444_800, allow_inf_nan=False, description="Unix time")


class HookJob(BaseModel):
    # strict: an id is an integer, never a float or a bool read as one
    job_id: int = Field(ge=1, le=MAX_JOB_ID, strict=True)
    nodes: str = Field(default="", max_length=65536)
    priority: int | None = Field(default=None, ge=0, le=MAX_JOB_ID, strict=True)  # 26.05+
    exclusive: str | None = Field(default=None, max_length=64)  # 26.05+: "NODE", "USER", ...


class HookCall(BaseModel):
    hostlist: str = Field(description="Slurm hostlist expression, e.g. cloud[1-3]")
    jobs: list[HookJob] = Field(default_factory=list, description="from SLURM_RESUME_FILE")
    t0: float | None = Field(default=None, ge=0, le=4_102_444_800, allow_inf_nan=False,
                             description="when the hook process started (Unix time), for latency")
    timeout_s: float | None = Field(default=None, gt=0, le=30, allow_inf_nan=False,
                                    description="how long the hook waits for this answer")
    deadline: float | None = Field(default=None, ge=0, le=4_102_444_800, allow_inf_nan=False,
                                   description="Unix time the hook gives up: past it, nothing is recorded")


class NoticeCall(BaseModel):
    node: str = Field(max_length=256)
    kind: str = Field(default="spot-interruption", pattern=r"^[a-z][a-z-]{0,39}$",
                      description="spot-interruption | rebalance | preempted")
    deadline: float | None = Field(default=None, ge=0, le=4_102_444_800, allow_inf_nan=False,
                                   description="Unix time the node goes away")
    detail: str = ""

    @field_validator("detail")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return check_reason(value)  # the adapter's own rule: what is accepted here, Slurm will take


class GcBody(BaseModel):
    """``burstctl cloud gc``: list the orphans (``dry_run``), or queue their collection for the leader."""

    dry_run: bool = False
    grace_s: float | None = Field(None, ge=0, le=365 * 86400)  # None: daemon.orphan_grace_s
    pool: str | None = Field(None, max_length=64)  # None: every pool


class ParityCall(BaseModel):
    node: str = Field(max_length=256)
    differences: list[str] = Field(min_length=1, max_length=1000,
                                   description="each difference in words (burstd.domain.parity.Difference.message)")


class ReasonBody(BaseModel):
    reason: str = ""

    @field_validator("reason")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return check_reason(value)


class BudgetBody(BaseModel):
    # the Store validates it (negative, NaN, sub-micro-dollar: a 422 naming the account, nothing written)
    usd: str | int | float


class EnrollCall(BaseModel):
    """A cloud node's proof of which instance it is (``burstd.daemon.node_identity``): AWS's signed identity
    document, or GCP's identity token. Capped: a real proof is under 2 KiB."""

    cloud: Literal["aws", "gcp"]
    document: str | None = Field(None, max_length=8192, description="AWS: dynamic/instance-identity/document")
    signature: str | None = Field(None, max_length=8192, description="AWS: dynamic/instance-identity/signature")
    token: str | None = Field(None, max_length=8192,
                              description="GCP: instance/service-accounts/default/identity (format=full)")
