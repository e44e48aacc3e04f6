"""Telling the burstd daemon about a notice (best effort: the daemon also reads the drain reason).

    POST /v1/notices   {"node": "cloud1", "kind": "spot-interruption", "deadline": 1795306320.0,
                        "detail": "burstd-preempt: terminate at 2026-11-22T00:12:00Z (aws)"}

``daemon_url`` is ``unix:/run/burstd/burstd.sock`` (the control API's socket, on the head node or on the
local bed) or ``https://HOST:PORT`` (the daemon's TLS listener, with ``daemon_token_file`` holding this node's
own agent credential, which the daemon issues per lease, and ``daemon_ca_file`` to verify the daemon).
Plain ``http://`` is refused: a token must never cross the network in clear.
"""

from __future__ import annotations

import logging

import httpx

from burstd.domain.preemption import Notice, preemption_reason
from burstd.secure_files import UnsafeFileError, read_secret
from burstd.unix_http import unix_transport

log = logging.getLogger("burstd.agent")

NOTICE_PATH = "/v1/notices"
PARITY_PATH = "/v1/parity"
KINDS = {"interruption": "spot-interruption", "rebalance": "rebalance"}


class ReportConfigError(ValueError):
    """The agent's report settings cannot be used safely (plain http, a token file others can read)."""


def read_token(token_file: str) -> str:
    """This node's agent credential: refused if another user made the file or may read it, or if it is empty."""
    try:
        token = read_secret("agent.daemon_token_file", token_file).decode(errors="replace").strip()
    except UnsafeFileError as exc:
        raise ReportConfigError(str(exc)) from None
    if not token:
        raise ReportConfigError(f"agent.daemon_token_file: {token_file} is empty")
    return token


def _client(daemon_url: str, token_file: str | None, timeout_s: float,
            ca_file: str | None = None) -> tuple[httpx.Client, str]:
    headers = {}
    if token_file:
        headers["Authorization"] = "Bearer " + read_token(token_file)
    if daemon_url.startswith("unix:"):
        transport = unix_transport(daemon_url.removeprefix("unix:"))
        return httpx.Client(
            transport=transport, timeout=timeout_s, headers=headers, trust_env=False
        ), "http://burstd"
    if not daemon_url.startswith("https://"):
        raise ReportConfigError(f"agent.daemon_url: {daemon_url!r} must be unix:/path or https://host:port")
    return httpx.Client(timeout=timeout_s, headers=headers, trust_env=False, verify=ca_file or True), \
        daemon_url.rstrip("/")


def notice_body(node: str, notice: Notice) -> dict:
    """The daemon's ``NoticeCall`` (burstd/api/models.py)."""
    return {
        "node": node,
        "kind": KINDS[notice.kind],
        "deadline": notice.deadline if notice.kind == "interruption" else None,
        "detail": preemption_reason(notice),
    }


def report_notice(
    daemon_url: str | None,
    node: str,
    notice: Notice,
    *,
    token_file: str | None = None,
    ca_file: str | None = None,
    timeout_s: float = 3.0,
) -> bool:
    """Post the notice; True when the daemon took it. Never raises: failures are logged."""
    if not daemon_url:
        return False
    try:
        client, base = _client(daemon_url, token_file, timeout_s, ca_file)
        with client:
            r = client.post(base + NOTICE_PATH, json=notice_body(node, notice))
        if r.status_code >= 300:
            log.error("daemon refused notice node=%s status=%s body=%s", node, r.status_code, r.text[:200])
            return False
        return True
    except ReportConfigError as exc:
        log.error("notice not reported: %s", exc)
        return False
    except (httpx.HTTPError, OSError) as exc:
        log.error("daemon unreachable at %s node=%s error=%s", daemon_url, node, exc)
        return False


class DaemonUnreachable(RuntimeError):
    """The daemon could not be asked (network, TLS, its answer): the parity gate cannot decide."""


def get_from_daemon(daemon_url: str, path: str, *, token_file: str | None = None, ca_file: str | None = None,
                    timeout_s: float = 10.0) -> httpx.Response | None:
    """``GET path`` from the daemon: its 200 answer, or None for 404 (it knows nothing of what was asked).
    ``DaemonUnreachable`` for the network, TLS or any other status; ``ReportConfigError`` for unsafe settings."""
    try:
        client, base = _client(daemon_url, token_file, timeout_s, ca_file)
        with client:
            r = client.get(base + path)
    except (httpx.HTTPError, OSError) as exc:
        raise DaemonUnreachable(f"daemon unreachable at {daemon_url}: {exc}") from None
    if r.status_code == 404:
        return None
    if r.status_code != 200:
        raise DaemonUnreachable(f"daemon answered {r.status_code} for {path}: {r.text[:200]}")
    return r


def fetch_parity_settings(daemon_url: str, *, token_file: str | None = None, ca_file: str | None = None,
                          timeout_s: float = 10.0) -> dict | None:
    """``GET /v1/parity``: the reference, allowed differences and checks; None when the daemon has no reference
    (404). ``DaemonUnreachable`` otherwise, ``ReportConfigError`` for unsafe settings."""
    r = get_from_daemon(daemon_url, PARITY_PATH, token_file=token_file, ca_file=ca_file, timeout_s=timeout_s)
    if r is None:
        return None
    try:
        data = r.json()
    except ValueError:
        raise DaemonUnreachable(f"daemon's {PARITY_PATH} answer is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("reference"), dict):
        raise DaemonUnreachable(f"daemon's {PARITY_PATH} answer has no reference")
    return data


def report_parity(daemon_url: str | None, node: str, differences: list[str], *, token_file: str | None = None,
                  ca_file: str | None = None, timeout_s: float = 10.0) -> bool:
    """``POST /v1/parity``: the node differs; True when the daemon took it. Never raises: failures are logged."""
    if not daemon_url:
        return False
    try:
        client, base = _client(daemon_url, token_file, timeout_s, ca_file)
        with client:
            r = client.post(base + PARITY_PATH, json={"node": node, "differences": differences})
    except ReportConfigError as exc:
        log.error("parity result not reported: %s", exc)
        return False
    except (httpx.HTTPError, OSError) as exc:
        log.error("daemon unreachable at %s node=%s error=%s", daemon_url, node, exc)
        return False
    if r.status_code >= 300:
        log.error("daemon refused parity result node=%s status=%s body=%s", node, r.status_code, r.text[:200])
        return False
    return True
