"""The local provider's per-VM metadata endpoint: the AWS IMDSv2 shapes (and the GCP preempted flag).

Each namespace VM runs one of these inside its network namespace, so the node agent there watches it
exactly as it would watch a real cloud's metadata service::

    python -m burstd.providers.local.metadata --state-dir /run/burstd/local/cloud1 \\
        --listen 0.0.0.0:1338 --instance-id i-local-cloud1 --node cloud1 --address 10.77.0.101

    TOKEN=$(curl -s -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://169.254.169.254:1338/latest/api/token)
    curl -s -H "X-aws-ec2-metadata-token: $TOKEN" \\
        http://169.254.169.254:1338/latest/meta-data/spot/instance-action      # 404 until a notice

A preemption is announced by writing the VM's state directory (``announce_preemption``), never over
the network, so nothing inside a VM can fake or cancel one. The server reads the state on every request.

Served (IMDSv2: every GET needs a token from ``PUT /latest/api/token``):

* ``/latest/meta-data/instance-id``, ``local-ipv4``, ``hostname``, ``instance-life-cycle`` (``spot``)
* ``/latest/meta-data/spot/instance-action``: 404, or 200 ``{"action": "terminate", "time": "...Z"}``
* ``/latest/meta-data/events/recommendations/rebalance``: 404, or 200 ``{"noticeTime": "...Z"}``
* ``/latest/meta-data/tags/instance/`` and ``.../tags/instance/KEY``
* ``/latest/user-data``: the state directory's ``user-data`` file, 404 without one (an image VM's agent settings)
* GCP: ``/computeMetadata/v1/instance/preempted`` (``Metadata-Flavor: Google``; ``?wait_for_change=true``)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from burstd.domain.preemption import iso

LINK_LOCAL = "169.254.169.254"
NOTICE_FILE = "instance-action.json"
REBALANCE_FILE = "rebalance.json"
MAX_TOKEN_TTL_S = 21600
MAX_WAIT_S = 300.0


# --- the control side: what the provider (or burstctl) does to a VM's metadata ---------------------


def _write_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def announce_preemption(
    state_dir: str | os.PathLike, notice_s: float, *, action: str = "terminate", now: float | None = None
) -> float:
    """Make the VM's metadata announce a spot interruption ``notice_s`` seconds from now.

    Returns the deadline (Unix seconds). Announcing again changes nothing and returns the first
    deadline (a notice, once given, stands). Reclaiming the VM at the deadline is the caller's job.
    """
    if action not in ("terminate", "stop", "hibernate"):
        raise ValueError(f"unknown spot action {action!r}: terminate, stop or hibernate")
    if notice_s < 0:
        raise ValueError("notice_s must be >= 0")
    now = time.time() if now is None else now
    deadline = float(int(now + notice_s))  # IMDS times have whole seconds
    current = read_notice(state_dir)
    if current is not None:
        return current[1]
    _write_atomic(
        Path(state_dir) / NOTICE_FILE, {"action": action, "time": iso(deadline), "deadline": deadline}
    )
    return deadline


def announce_rebalance(state_dir: str | os.PathLike, *, now: float | None = None) -> float:
    now = float(int(time.time() if now is None else now))
    _write_atomic(Path(state_dir) / REBALANCE_FILE, {"noticeTime": iso(now), "at": now})
    return now


def read_notice(state_dir: str | os.PathLike) -> tuple[str, float] | None:
    """(action, deadline) of the announced interruption, or None."""
    try:
        data = json.loads((Path(state_dir) / NOTICE_FILE).read_text())
        return str(data["action"]), float(data["deadline"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear_notices(state_dir: str | os.PathLike) -> None:
    for name in (NOTICE_FILE, REBALANCE_FILE):
        try:
            (Path(state_dir) / name).unlink()
        except FileNotFoundError:
            pass


# --- the server --------------------------------------------------------------------------------------


@dataclass
class Identity:
    instance_id: str
    node: str
    address: str = ""
    tags: dict[str, str] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    server: MetadataServer
    protocol_version = "HTTP/1.1"
    server_version = "burstd-local-imds/1"

    def log_message(self, format: str, *args) -> None:
        if self.server.verbose:
            sys.stderr.write(f"metadata {self.address_string()} {format % args}\n")

    def _send(
        self, code: int, body: str = "", ctype: str = "text/plain", headers: dict | None = None
    ) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_PUT(self) -> None:
        path = urlsplit(self.path).path
        if path != "/latest/api/token":
            return self._send(404, "Not Found")
        if self.headers.get("X-Forwarded-For"):
            return self._send(403, "Forbidden")  # as IMDSv2 does, to stop proxies fetching tokens
        ttl_text = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        try:
            ttl = int(ttl_text)
        except ValueError:
            return self._send(400, "Missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
        if not 1 <= ttl <= MAX_TOKEN_TTL_S:
            return self._send(400, "X-aws-ec2-metadata-token-ttl-seconds must be 1..21600")
        token = secrets.token_urlsafe(32)
        self.server.issue_token(token, ttl)
        self._send(200, token, headers={"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path.startswith("/computeMetadata/"):
            return self._gcp(url.path, parse_qs(url.query))
        if not url.path.startswith("/latest/"):
            return self._send(404, "Not Found")
        if not self.server.token_valid(self.headers.get("X-aws-ec2-metadata-token", "")):
            return self._send(401, "Unauthorized")
        self.server.count(url.path)
        value = self.server.aws_value(url.path)
        if value is None:
            return self._send(404, "Not Found")
        body, ctype = value
        self._send(200, body, ctype)

    def _gcp(self, path: str, query: dict[str, list[str]]) -> None:
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._send(403, "Missing Metadata-Flavor:Google header.")
        self.server.count(path)
        ident = self.server.identity
        if path == "/computeMetadata/v1/instance/preempted":
            wait = query.get("wait_for_change", ["false"])[0].lower() == "true"
            last = query.get("last_etag", [None])[0]
            timeout = min(float(query.get("timeout_sec", [MAX_WAIT_S])[0]), MAX_WAIT_S)
            value = self.server.gcp_preempted()
            if wait:
                start_etag = last or _etag(value)
                end = time.monotonic() + timeout
                while _etag(value) == start_etag and time.monotonic() < end and not self.server.stopping:
                    time.sleep(self.server.wait_step_s)
                    value = self.server.gcp_preempted()
            return self._send(200, value, headers={"ETag": _etag(value), "Metadata-Flavor": "Google"})
        simple = {
            "/computeMetadata/v1/instance/id": ident.instance_id,
            "/computeMetadata/v1/instance/name": ident.node,
            "/computeMetadata/v1/instance/hostname": ident.node,
        }
        if path in simple:
            return self._send(200, simple[path], headers={"Metadata-Flavor": "Google"})
        self._send(404, "Not Found")


def _etag(value: str) -> str:
    return hashlib.sha1(value.encode()).hexdigest()[:16]


class MetadataServer(ThreadingHTTPServer):
    """One VM's metadata service. ``serve_forever()`` in the VM, or ``start()`` a thread in tests."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        state_dir: str | os.PathLike,
        identity: Identity,
        host: str = "0.0.0.0",
        port: int = 1338,
        *,
        verbose: bool = False,
    ):
        self.state_dir = Path(state_dir)
        self.identity = identity
        self.verbose = verbose
        self.stopping = False
        self.wait_step_s = 0.1
        self._tokens: dict[str, float] = {}
        self._lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> MetadataServer:
        self._thread = threading.Thread(
            target=self.serve_forever, args=(0.05,), name="local-imds", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        self.shutdown()
        self.server_close()
        if self._thread:
            self._thread.join(5)

    # --- state ---------------------------------------------------------------------------------
    def count(self, path: str) -> None:
        with self._lock:
            self.requests[path] = self.requests.get(path, 0) + 1

    def issue_token(self, token: str, ttl: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._tokens = {t: exp for t, exp in self._tokens.items() if exp > now}
            self._tokens[token] = now + ttl

    def token_valid(self, token: str) -> bool:
        with self._lock:
            exp = self._tokens.get(token)
        return exp is not None and exp > time.monotonic()

    def _read(self, name: str) -> dict | None:
        try:
            return json.loads((self.state_dir / name).read_text())
        except (OSError, ValueError):
            return None

    def gcp_preempted(self) -> str:
        return "TRUE" if self._read(NOTICE_FILE) else "FALSE"

    def aws_value(self, path: str) -> tuple[str, str] | None:
        ident = self.identity
        if path == "/latest/user-data":
            try:
                return (self.state_dir / "user-data").read_text(), "text/plain"
            except OSError:
                return None
        md = "/latest/meta-data/"
        if path == "/latest/meta-data" or path == md:
            keys = [
                "events/",
                "hostname",
                "instance-id",
                "instance-life-cycle",
                "local-ipv4",
                "spot/",
                "tags/",
            ]
            return "\n".join(keys), "text/plain"
        if not path.startswith(md):
            return None
        key = path[len(md) :]
        plain = {
            "instance-id": ident.instance_id,
            "hostname": ident.node,
            "local-hostname": ident.node,
            "local-ipv4": ident.address,
            "instance-life-cycle": "spot",
        }
        if key in plain:
            return plain[key], "text/plain"
        if key == "spot/instance-action":
            data = self._read(NOTICE_FILE)
            if not data:
                return None
            return json.dumps({"action": data["action"], "time": data["time"]}), "application/json"
        if key == "events/recommendations/rebalance":
            data = self._read(REBALANCE_FILE)
            if not data:
                return None
            return json.dumps({"noticeTime": data["noticeTime"]}), "application/json"
        if key in ("tags/instance", "tags/instance/"):
            return "\n".join(sorted(ident.tags)), "text/plain"
        if key.startswith("tags/instance/") and key[len("tags/instance/") :] in ident.tags:
            return ident.tags[key[len("tags/instance/") :]], "text/plain"
        return None


# --- running it inside a namespace VM --------------------------------------------------------------


def add_link_local_alias(netns: str, *, ip_bin: str = "ip") -> None:
    """Give the VM's loopback the well-known metadata address (169.254.169.254), as clouds do.

    Each namespace has its own loopback, so every VM gets its own private 169.254.169.254.
    """
    r = subprocess.run(
        [ip_bin, "-n", netns, "addr", "add", f"{LINK_LOCAL}/32", "dev", "lo"],
        check=False,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 and "File exists" not in r.stderr:
        raise RuntimeError(f"cannot add {LINK_LOCAL} to {netns}: {r.stderr.strip()}")


# Only root may talk to the metadata address, as the cloud Slurm projects do on real VMs: the munge key's
# secret and the node's identity are a metadata call away, and every job on the node runs code there. The
# owner match sees the uid of the socket that sends, so jobs (any other uid) get a reset; the agent and the
# bootstrap (root) get through. The same rule is what scripts/node-bootstrap.sh applies on a cloud VM.
METADATA_LOCK = f"""table inet burstd_metadata {{
    chain output {{
        type filter hook output priority 0; policy accept;
        ip daddr {LINK_LOCAL} meta skuid != 0 counter reject with tcp reset
    }}
}}
"""


def lock_to_root(netns: str, *, nft_bin: str = "nft") -> None:
    """Make ``LINK_LOCAL`` reachable only to root inside ``netns`` (idempotent: the table is replaced)."""
    import shutil

    nft = shutil.which(nft_bin, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if nft is None:
        raise RuntimeError("nft (nftables) is not installed: the VM's metadata endpoint cannot be closed to "
                           "non-root users; run scripts/install-deps.sh")
    enter = ["nsenter", f"--net=/run/netns/{netns}", "--"]
    subprocess.run(enter + [nft, "delete", "table", "inet", "burstd_metadata"], capture_output=True, check=False)
    r = subprocess.run(enter + [nft, "-f", "-"], input=METADATA_LOCK, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"cannot close {LINK_LOCAL} to non-root users in {netns}: {r.stderr.strip()}")


def server_argv(
    netns: str | None,
    state_dir: str | os.PathLike,
    identity: Identity,
    *,
    listen: str = "0.0.0.0:1338",
    python: str = sys.executable,
) -> list[str]:
    """The command that runs a VM's metadata server (inside ``netns`` through nsenter when given).

    nsenter, not ``ip netns exec``: the latter remounts /sys (see TESTBED.md gotcha 2).
    """
    argv = [
        python,
        "-m",
        "burstd.providers.local.metadata",
        "--state-dir",
        str(state_dir),
        "--listen",
        listen,
        "--instance-id",
        identity.instance_id,
        "--node",
        identity.node,
        "--address",
        identity.address,
    ]
    for k, v in identity.tags.items():
        argv += ["--tag", f"{k}={v}"]
    if netns:
        argv = ["nsenter", f"--net=/run/netns/{netns}", "--"] + argv
    return argv


def _parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen wants HOST:PORT, got {text!r}")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m burstd.providers.local.metadata", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--listen", type=_parse_listen, default=("0.0.0.0", 1338))
    ap.add_argument("--instance-id", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--address", default="")
    ap.add_argument("--tag", action="append", default=[], help="KEY=VALUE, served under tags/instance/")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    tags = dict(t.split("=", 1) for t in a.tag if "=" in t)
    host, port = a.listen
    srv = MetadataServer(
        a.state_dir, Identity(a.instance_id, a.node, a.address, tags), host, port, verbose=a.verbose
    )
    sys.stderr.write(f"burstd local metadata for {a.node} on {srv.url}, state {a.state_dir}\n")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
