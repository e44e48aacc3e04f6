"""A cloud node proves which instance it is and gets its lease's agent token (``POST /v1/enroll``).

    identity = verify_aws(document, signature, certificate_pem)      # or verify_gcp(token, certs, audience)
    lease = lease_to_enroll(identity, open_leases, config.pools)      # IdentityRefused(status, why) otherwise

* **AWS**: the instance identity document and its SHA256withRSA signature (IMDS
  ``dynamic/instance-identity/document`` and ``.../signature``), checked against AWS's public certificate for the
  pool's region (``[pools.aws] identity_certificate``, a PEM file the admin takes from AWS's documentation).
* **GCP**: the instance's identity token (metadata ``instance/service-accounts/default/identity`` with
  ``format=full``), a JWT Google signs, checked against Google's keys (``[pools.gcp] identity_certs_url``) for the
  audience this daemon expects (``[api] node_url``: the URL the nodes reach it at).

The instance must be the one an open lease of that pool launched, and the lease must not be READY yet: until its
slurmd registers no job has run on the node, and the bootstrap closes the metadata endpoint to every user but
root before slurmd starts, so while a proof counts only the node's own boot can hold it. The token is the one the
daemon would mint for the lease anyway (``agent_auth``): enrolling stores nothing, and the token dies with the
lease. Verification is pure; only the Google keys are fetched (``GoogleKeys``, cached).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from burstd.config import AwsPool, GcpPool, PoolConfig
from burstd.domain.lease import Lease, LeaseState

#: a proof counts only before the node's slurmd registered (no job has run there yet)
ENROLLABLE = frozenset({LeaseState.LAUNCHING, LeaseState.BOOTING})
GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
MAX_PROOF = 8192  # characters of a document, signature or token: real ones are under 2 KiB


@dataclass(frozen=True)
class InstanceIdentity:
    cloud: str  # "aws" | "gcp"
    instance_id: str  # as the provider records it: "i-0abc..." (AWS), "<zone>/<name>" (GCP)
    account: str  # AWS account id, GCP project id
    place: str  # AWS region, GCP zone


class IdentityRefused(Exception):
    """Why a proof was not accepted; ``status`` is the HTTP answer (401 bad proof, 403 not now, 404 no lease)."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status = status


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_PROOF:
        raise IdentityRefused(401, f"{what}: missing, not text, or over {MAX_PROOF} characters")
    return value


def verify_aws(document: str, signature_b64: str, certificate_pem: bytes) -> InstanceIdentity:
    """The document's identity, if AWS's certificate verifies its signature (PKCS#1 v1.5, SHA-256)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    document = _text(document, "document")
    try:
        signature = base64.b64decode(_text(signature_b64, "signature").strip(), validate=True)
    except (binascii.Error, ValueError):
        raise IdentityRefused(401, "signature: not base64") from None
    try:
        key = x509.load_pem_x509_certificate(certificate_pem).public_key()
    except ValueError as exc:
        raise IdentityRefused(500, f"the configured AWS identity certificate cannot be read: {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise IdentityRefused(500, "the configured AWS identity certificate does not hold an RSA key")
    try:
        key.verify(signature, document.encode(), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise IdentityRefused(401, "the instance identity document's signature does not verify") from None
    try:
        doc = json.loads(document)
    except ValueError:
        raise IdentityRefused(401, "the instance identity document is not JSON") from None
    if not isinstance(doc, dict):
        raise IdentityRefused(401, "the instance identity document is not a JSON object")
    instance, account, region = _strings(doc, ("instanceId", "accountId", "region"), "the identity document")
    return InstanceIdentity("aws", instance, account, region)


def verify_gcp(token: str, certs: Mapping[str, str], audience: str) -> InstanceIdentity:
    """The instance a Google-signed identity token (``format=full``) names, for ``audience`` only."""
    from google.auth import exceptions as gexc
    from google.auth import jwt

    token = _text(token, "token")
    try:
        claims = jwt.decode(token, certs=dict(certs), verify=True, audience=audience, clock_skew_in_seconds=60)
    except (ValueError, gexc.GoogleAuthError) as exc:  # bad signature, audience, expiry, shape
        raise IdentityRefused(401, f"the identity token does not verify: {str(exc)[:200]}") from None
    if claims.get("iss") not in GOOGLE_ISSUERS:
        raise IdentityRefused(401, "the identity token was not issued by Google")
    ce = claims.get("google", {}).get("compute_engine") if isinstance(claims.get("google"), dict) else None
    if not isinstance(ce, dict):
        raise IdentityRefused(401, "the identity token names no instance (ask with format=full)")
    name, zone, project = _strings(ce, ("instance_name", "zone", "project_id"), "the identity token")
    return InstanceIdentity("gcp", f"{zone}/{name}", project, zone)


def _strings(claims: dict, keys: tuple[str, ...], what: str) -> list[str]:
    values = [claims.get(k) for k in keys]
    if not all(isinstance(v, str) and v and len(v) <= 256 for v in values):
        raise IdentityRefused(401, f"{what} lacks one of {', '.join(keys)}")
    return [str(v) for v in values]


def lease_to_enroll(identity: InstanceIdentity, leases: Iterable[Lease], pools: Iterable[PoolConfig]) -> Lease:
    """The open lease that launched this instance, in a pool of the identity's cloud, account and place."""
    by_name = {p.name: p for p in pools}
    for lease in leases:
        pool = by_name.get(lease.pool)
        if lease.instance_id != identity.instance_id or pool is None or pool.provider != identity.cloud:
            continue
        if isinstance(pool, AwsPool) and pool.aws.region != identity.place:
            raise IdentityRefused(403, f"instance {identity.instance_id} is in {identity.place}, "
                                       f"pool {pool.name} in {pool.aws.region}")
        if isinstance(pool, GcpPool) and (pool.gcp.project != identity.account or identity.place not in pool.gcp.zones):
            raise IdentityRefused(403, f"instance {identity.instance_id} of project {identity.account} is not in "
                                       f"pool {pool.name}'s project and zones")
        if lease.state not in ENROLLABLE:
            raise IdentityRefused(403, f"lease {lease.lease_id} is {lease.state.value}: a node enrols before its "
                                       "slurmd registers")
        return lease
    raise IdentityRefused(404, f"no open lease launched {identity.cloud} instance {identity.instance_id} "
                               "(not yet recorded: ask again)")


class GoogleKeys:
    """Google's identity-token certificates (``{key id: PEM}``), fetched over HTTPS and kept for an hour; an
    unknown key id refetches at most once a minute, so forged key ids cannot make the daemon hammer Google."""

    def __init__(self, url: str, *, keep_s: float = 3600.0, refetch_s: float = 60.0,
                 fetch: Callable[[str], dict[str, str]] | None = None, clock: Callable[[], float] = time.monotonic):
        self.url, self._keep, self._refetch, self._clock = url, keep_s, refetch_s, clock
        self._fetch = fetch or _fetch_json
        self._keys: dict[str, str] = {}
        self._at = float("-inf")
        self._lock = threading.Lock()

    def for_token(self, token: str) -> dict[str, str]:
        kid = _key_id(token)
        with self._lock:
            age = self._clock() - self._at
            if age > self._keep or (kid not in self._keys and age > self._refetch):
                keys = self._fetch(self.url)
                if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
                    raise IdentityRefused(503, f"{self.url} did not answer with a key map")
                self._keys, self._at = keys, self._clock()
            return dict(self._keys)


def _key_id(token: str) -> str | None:
    try:
        header = json.loads(base64.urlsafe_b64decode(token.split(".", 1)[0] + "==="))
    except (ValueError, binascii.Error):
        return None
    return header.get("kid") if isinstance(header, dict) and isinstance(header.get("kid"), str) else None


def _fetch_json(url: str) -> dict[str, str]:
    import httpx

    try:
        r = httpx.get(url, timeout=10)
        r.raise_for_status()
        return r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise IdentityRefused(503, f"Google's identity keys could not be read from {url}: {exc}") from None
