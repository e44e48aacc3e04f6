"""Clients of the control API.

``ApiClient`` (httpx over the unix socket, or TCP with a token) is what ``burstctl`` uses::

    with ApiClient.from_config(cfg) as api:
        api.get("/v1/status")

``post_unix_json`` is the hooks' path: the standard library only, because a Slurm hook must return
within 100 ms and importing httpx alone takes ~140 ms on a small head node. Both raise ``ApiError``
with a message that says what to do.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any


class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None):
        self.status = status
        super().__init__(message)


def _down(socket_path: str, exc: BaseException) -> ApiError:
    if isinstance(exc, PermissionError) or "Permission denied" in str(exc):
        return ApiError(f"cannot open {socket_path}: Permission denied; the control socket is for members of "
                        f"the group in api.socket_group (ask an admin to add you)")
    return ApiError(f"burstd is not answering on {socket_path} ({exc.__class__.__name__}: {exc}); "
                    f"is the daemon running? (systemctl status burstd)")


def _detail(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace")[:500]
    detail = data.get("detail", data) if isinstance(data, dict) else data
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(f"{'.'.join(str(x) for x in d.get('loc', []))}: {d.get('msg')}" for d in detail)
    return str(detail)


def _refused(status: int, body: bytes) -> ApiError:
    if status == 413:  # said as what it is: the daemon answered, the request was over api.max_body_bytes
        return ApiError(f"burstd refused ({status}): request too large: {_detail(body)}", status)
    return ApiError(f"burstd refused ({status}): {_detail(body)}", status)


def _recv(sock: socket.socket, until: float | None) -> bytes:
    if until is not None:  # one bound on the whole answer, not a fresh timeout per read
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        sock.settimeout(left)
    return sock.recv(65536)


def _read_response(sock: socket.socket, until: float | None = None) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response on a ``Connection: close`` socket (Content-Length or chunked),
    read by ``until`` (``time.monotonic()``) when given."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = _recv(sock, until)
        if not chunk:
            raise ConnectionError("connection closed before the response headers")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP response: {lines[0][:80]!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = headers.get("content-length")
    while True:
        if length is not None and len(body) >= int(length):
            body = body[: int(length)]
            break
        chunk = _recv(sock, until)
        if not chunk:
            break
        body += chunk
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return int(parts[1]), body


def unix_request(socket_path: str, method: str, path: str, payload: Any = None, timeout: float = 2.0) -> Any:
    """One HTTP call over the unix socket; the reply's JSON, or ApiError (daemon down, refused, timeout).

    A raw socket and a hand-written HTTP/1.1 request: importing ``http.client`` alone costs the hooks ~20 ms.
    """
    body = b"" if payload is None else json.dumps(payload).encode()
    request = (f"{method} {path} HTTP/1.1\r\nHost: burstd\r\nConnection: close\r\n"
               f"Content-Length: {len(body)}\r\n"
               + ("Content-Type: application/json\r\n" if payload is not None else "")
               + "\r\n").encode() + body
    until = time.monotonic() + timeout
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    send_error: OSError | None = None
    try:
        s.connect(socket_path)
        try:
            s.sendall(request)
        except (BrokenPipeError, ConnectionResetError) as exc:
            send_error = exc  # the daemon may have answered before reading it all (413) and closed: read that
        status, data = _read_response(s, until)
    except (OSError, ValueError) as exc:
        raise _down(socket_path, send_error or exc) from None
    finally:
        s.close()
    if status >= 400:
        raise _refused(status, data)
    return json.loads(data) if data else None


def post_unix_json(socket_path: str, path: str, payload: Any, timeout: float = 2.0) -> Any:
    """POST JSON over the unix socket (the hooks' call)."""
    return unix_request(socket_path, "POST", path, payload, timeout)


class ApiClient:
    def __init__(self, socket_path: str | None = None, *, url: str | None = None, token: str | None = None,
                 timeout: float = 10.0):
        import httpx

        from burstd.unix_http import unix_transport

        self.where = socket_path or url or "?"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if socket_path:
            transport = unix_transport(socket_path)
            self._http = httpx.Client(transport=transport, base_url="http://burstd", timeout=timeout, headers=headers)
        else:
            self._http = httpx.Client(base_url=url or "http://127.0.0.1:8787", timeout=timeout, headers=headers)

    @classmethod
    def from_config(cls, config, timeout: float = 10.0) -> ApiClient:
        return cls(config.api.socket, timeout=timeout)

    def request(self, method: str, path: str, **kwargs) -> Any:
        import httpx

        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise _down(self.where, exc) from None
        if resp.status_code >= 400:
            raise _refused(resp.status_code, resp.content)
        return resp.json() if resp.content else None

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None) -> Any:
        return self.request("POST", path, json=json)

    def put(self, path: str, json: Any = None) -> Any:
        return self.request("PUT", path, json=json)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
