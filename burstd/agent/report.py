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

log = logging.getLogger("burstd.agent")

NOTICE_PATH = "/v1/notices"
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
        transport = httpx.HTTPTransport(uds=daemon_url.removeprefix("unix:"))
        return httpx.Client(
            transport=transport, timeout=timeout_s, headers=headers, trust_env=False
        ), "http://burstd"
    if not daemon_url.startswith("https://"):
        raise ReportConfigError(f"agent.daemon_url: {daemon_url!r} must be unix:/path or https://host:port")
    return httpx.Client(timeout=timeout_s, headers=headers, trust_env=False, verify=ca_file or True), \
        daemon_url.rstrip("/")


def notice_body(node: str, notice: Notice) -> dict:
    """The daemon's ``NoticeCall`` (burstd/daemon/api.py)."""
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
