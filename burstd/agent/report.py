"""Telling the burstd daemon about a notice (best effort: the daemon also reads the drain reason).

    POST /v1/notices   {"node": "cloud1", "kind": "spot-interruption", "deadline": 1795306320.0,
                        "detail": "burstd-preempt: terminate at 2026-11-22T00:12:00Z (aws)"}

``daemon_url`` is ``unix:/run/burstd/burstd.sock`` (the control API's socket, on the head node or on the
local bed) or ``http(s)://HOST:PORT`` (the optional TCP listener, with ``daemon_token_file``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx

from burstd.domain.preemption import Notice, preemption_reason

log = logging.getLogger("burstd.agent")

NOTICE_PATH = "/v1/notices"
KINDS = {"interruption": "spot-interruption", "rebalance": "rebalance"}


def _client(daemon_url: str, token_file: str | None, timeout_s: float) -> tuple[httpx.Client, str]:
    headers = {}
    if token_file:
        headers["Authorization"] = "Bearer " + Path(token_file).read_text().strip()
    if daemon_url.startswith("unix:"):
        transport = httpx.HTTPTransport(uds=daemon_url.removeprefix("unix:"))
        return httpx.Client(
            transport=transport, timeout=timeout_s, headers=headers, trust_env=False
        ), "http://burstd"
    return httpx.Client(timeout=timeout_s, headers=headers, trust_env=False), daemon_url.rstrip("/")


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
    timeout_s: float = 3.0,
) -> bool:
    """Post the notice; True when the daemon took it. Never raises: failures are logged."""
    if not daemon_url:
        return False
    try:
        client, base = _client(daemon_url, token_file, timeout_s)
        with client:
            r = client.post(base + NOTICE_PATH, json=notice_body(node, notice))
        if r.status_code >= 300:
            log.error("daemon refused notice node=%s status=%s body=%s", node, r.status_code, r.text[:200])
            return False
        return True
    except (httpx.HTTPError, OSError) as exc:
        log.error("daemon unreachable at %s node=%s error=%s", daemon_url, node, exc)
        return False
