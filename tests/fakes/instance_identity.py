"""The clouds' instance-identity signers, for tests: an RSA key and certificate that stand where AWS's regional
certificate and Google's token keys stand, signing exactly as those services do (AWS: SHA256withRSA over the
identity document, base64; Google: an RS256 JWT with the ``google.compute_engine`` claims of ``format=full``)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID


class _Signer:
    def __init__(self, name: str):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                .sign(self.key, hashes.SHA256()))
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        self.key_pem = self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())


class AwsIdentity(_Signer):
    """AWS's side: ``sign(instance_id=...)`` is what IMDS serves at dynamic/instance-identity/{document,signature}."""

    def __init__(self):
        super().__init__("ec2.amazonaws.com (test)")

    def document(self, instance_id: str, region: str = "us-east-1", account: str = "123456789012") -> str:
        return json.dumps({"accountId": account, "architecture": "x86_64", "availabilityZone": f"{region}a",
                           "imageId": "ami-0123456789abcdef0", "instanceId": instance_id,
                           "instanceType": "m5.large", "pendingTime": "2026-11-27T10:00:00Z",
                           "privateIp": "10.0.0.7", "region": region, "version": "2017-09-30"}, indent=2)

    def sign(self, document: str) -> str:
        return base64.b64encode(self.key.sign(document.encode(), padding.PKCS1v15(), hashes.SHA256())).decode()

    def proof(self, instance_id: str, **kw) -> dict[str, str]:
        doc = self.document(instance_id, **kw)
        return {"cloud": "aws", "document": doc, "signature": self.sign(doc)}


class GoogleIdentity(_Signer):
    """Google's side: ``token(...)`` is what the metadata server's identity endpoint answers; ``certs`` what
    https://www.googleapis.com/oauth2/v1/certs serves."""

    kid = "test-key-1"

    def __init__(self):
        super().__init__("accounts.google.com (test)")

    @property
    def certs(self) -> dict[str, str]:
        return {self.kid: self.cert_pem.decode()}

    def token(self, name: str, zone: str, project: str, audience: str, *, iss: str = "https://accounts.google.com",
              lifetime_s: float = 3600, issued: float | None = None, full: bool = True) -> str:
        from google.auth import crypt, jwt

        now = time.time() if issued is None else issued
        claims: dict = {"iss": iss, "aud": audience, "sub": "1234567890", "azp": "1234567890",
                        "iat": int(now), "exp": int(now + lifetime_s)}
        if full:
            claims["google"] = {"compute_engine": {"instance_name": name, "zone": zone, "project_id": project,
                                                   "instance_id": "4567890123", "project_number": 42,
                                                   "instance_creation_timestamp": int(now) - 30}}
        return jwt.encode(crypt.RSASigner.from_string(self.key_pem, key_id=self.kid), claims).decode()

    def proof(self, name: str, zone: str, project: str, audience: str, **kw) -> dict[str, str]:
        return {"cloud": "gcp", "token": self.token(name, zone, project, audience, **kw)}
