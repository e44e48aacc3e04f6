"""A cloud node's first call: it proves which instance it is and gets its lease's agent token (AWS and GCP; the
local provider hands the token in at boot). Open to anyone: the proof is the credential
(``burstd.daemon.node_identity`` says what counts, and when)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, HTTPException

from burstd.api.context import RouteContext
from burstd.api.models import EnrollCall
from burstd.config import AwsPool, GcpPool
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.node_identity import (
    GoogleKeys,
    IdentityRefused,
    InstanceIdentity,
    lease_to_enroll,
    verify_aws,
    verify_gcp,
)

log = get_logger("api")


def register(app: FastAPI, ctx: RouteContext) -> None:
    config = ctx.config
    google: dict[str, GoogleKeys] = {}  # certs URL -> its cached keys

    def aws_identity(body: EnrollCall) -> InstanceIdentity:
        certs = sorted({p.aws.identity_certificate for p in config.pools
                        if isinstance(p, AwsPool) and p.aws.identity_certificate})
        if not certs:
            raise IdentityRefused(403, "no AWS pool has [pools.aws] identity_certificate: AWS nodes cannot enrol")

        def verify_with(path: str) -> InstanceIdentity:
            try:
                pem = Path(path).read_bytes()
            except OSError as exc:
                raise IdentityRefused(500, f"[pools.aws] identity_certificate {path}: {exc.strerror}") from None
            return verify_aws(body.document or "", body.signature or "", pem)

        return _first_verified(certs, verify_with)  # a pool per region at most: one or two certificates

    def gcp_identity(body: EnrollCall) -> InstanceIdentity:
        audience = config.api.node_url
        if not audience:
            raise IdentityRefused(403, "[api] node_url is not set: GCP nodes cannot enrol (their identity token "
                                       "must name the URL they reach this daemon at)")
        urls = sorted({p.gcp.identity_certs_url for p in config.pools if isinstance(p, GcpPool)})
        if not urls:
            raise IdentityRefused(403, "no GCP pool is configured")

        def verify_with(url: str) -> InstanceIdentity:
            keys = google.setdefault(url, GoogleKeys(url))
            return verify_gcp(body.token or "", keys.for_token(body.token or ""), audience)

        return _first_verified(urls, verify_with)

    @app.post("/v1/enroll", tags=["public"])
    def enroll(body: EnrollCall) -> dict:
        """A cloud node's signed identity for its lease's agent token (0600 on the node; docs/security.md). 401: the
        proof does not verify; 403: not this daemon's, or the lease is past its boot; 404: no open lease launched
        that instance (yet: a gang member's id is recorded a moment after it boots)."""
        try:
            identity = aws_identity(body) if body.cloud == "aws" else gcp_identity(body)
            lease = lease_to_enroll(identity, ctx.ctl.leases(), config.pools)
        except IdentityRefused as exc:
            log.warning("enrolment refused", extra=ev(cloud=body.cloud, status=exc.status, error=str(exc)))
            raise HTTPException(exc.status, str(exc)) from None
        token = ctx.credentials().token_for(lease)
        log.info("node enrolled", extra=ev(node=lease.node_name, lease=lease.lease_id,
                                           instance=identity.instance_id))
        return {"node": lease.node_name, "lease": lease.lease_id, "token": token}


def _first_verified(anchors: list[str], verify: Callable[[str], InstanceIdentity]) -> InstanceIdentity:
    """The identity the first trust anchor verifies; if none does, the last refusal (401). Any other refusal (a
    certificate that cannot be read, Google's keys out of reach) is the daemon's trouble and is raised at once."""
    refused = IdentityRefused(401, "no trust anchor verifies this proof")
    for anchor in anchors:
        try:
            return verify(anchor)
        except IdentityRefused as exc:
            if exc.status != 401:
                raise
            refused = exc
    raise refused
