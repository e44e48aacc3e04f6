"""Clients of the control API.

``ApiClient`` (httpx over the unix socket, or TCP with a token) is what ``burstctl`` uses::

    with ApiClient.from_config(cfg) as api:
        api.get("/v1/status")

``post_unix_json`` is the hooks' path: the standard library only, because a Slurm hook must return
within 100 ms and importing httpx alone takes ~140 ms on a small head node. Both raise ``ApiError``
with a message that says what to do.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any


class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None):
        self.status = status
        super().__init__(message)


def _down(socket_path: str, exc: BaseException) -> ApiError:
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


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("burstd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def post_unix_json(socket_path: str, path: str, payload: Any, timeout: float = 2.0) -> Any:
    """POST JSON over the unix socket; the reply's JSON, or ApiError (daemon down, refused, timeout)."""
    conn = _UnixConnection(socket_path, timeout)
    try:
        body = json.dumps(payload).encode()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _down(socket_path, exc) from None
    finally:
        conn.close()
    if resp.status >= 400:
        raise ApiError(f"burstd refused ({resp.status}): {_detail(data)}", resp.status)
    return json.loads(data) if data else None


class ApiClient:
    def __init__(self, socket_path: str | None = None, *, url: str | None = None, token: str | None = None,
                 timeout: float = 10.0):
        import httpx

        self.where = socket_path or url or "?"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if socket_path:
            transport = httpx.HTTPTransport(uds=socket_path)
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
            raise ApiError(f"burstd refused ({resp.status_code}): {_detail(resp.content)}", resp.status_code)
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
