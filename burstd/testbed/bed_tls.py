"""A throwaway CA and a server certificate for a bed daemon's TLS listener (the demo's cloud nodes reach the daemon
over https on the bridge), made with the ``openssl`` command every Debian has: no test-only package needed.
Every argument is a list item (no shell); the key files are 0600."""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BedTls:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()[-300:]}")


def make_bed_tls(where: Path, ips: tuple[str, ...]) -> BedTls:
    """CA and certificate (valid a day) for ``ips`` (checked as IP addresses) and localhost, under ``where``."""
    names = ",".join([*(f"IP:{ipaddress.ip_address(ip)}" for ip in ips), "DNS:localhost"])
    where.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (where / n for n in ("ca.key", "ca.pem", "key.pem", "req.csr", "cert.pem"))
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", str(ca_key), "-out", str(ca), "-days", "1",
             "-subj", "/CN=burstd bed CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=burstd")
    ext = where / "san.cnf"
    ext.write_text(f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "1", "-extfile", str(ext))
    for private in (ca_key, key):
        private.chmod(0o600)
    ca.chmod(0o644)
    return BedTls(ca, cert, key)
