"""``burstd-agent --enroll``: a new AWS or GCP node proves which instance it is and keeps its agent token.

node-bootstrap.sh runs it as root after closing the metadata endpoint to other users and before the parity gate
(which needs the token) and slurmd. The agent reads its instance's signed identity from the metadata service
(AWS: the identity document and its signature; GCP: an identity token for the daemon's URL), posts it to the
daemon (``POST /v1/enroll``, ``burstd.daemon.node_identity``) and writes the token it gets to
``agent.daemon_token_file`` (0600, whole or not at all). A token already there is kept: running it again changes
nothing. Exit 0: the token is in place, or this node has nothing to enrol with (no daemon URL or token file
configured; the local provider hands its token in at boot); 1: the daemon refused; 2: bad settings; 3: the
metadata service or the daemon could not be asked in time.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from burstd.agent.report import ReportConfigError, _client, read_token
from burstd.agent.watchers import Watcher, WatchError, make_watcher
from burstd.config import AgentConfig
from burstd.daemon.agent_auth import AgentCredentials

log = logging.getLogger("burstd.agent")

ENROLL_PATH = "/v1/enroll"
RETRY_S = 5.0  # a gang member boots a moment before its instance id is recorded: the daemon says 404 until then


def enroll(agent: AgentConfig, node: str | None, *, wait_s: float = 300.0, watcher: Watcher | None = None,
           sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> int:
    if agent.provider == "local" or not agent.daemon_url or not agent.daemon_token_file:
        log.info("enrol: nothing to do (provider %s, daemon_url %s, daemon_token_file %s)", agent.provider,
                 agent.daemon_url or "unset", agent.daemon_token_file or "unset")
        return 0
    try:
        if Path(agent.daemon_token_file).exists():
            read_token(agent.daemon_token_file)  # ours, private and not empty, or refused
            log.info("enrol: %s is in place already", agent.daemon_token_file)
            return 0
        client, base = _client(agent.daemon_url, None, agent.http_timeout_s * 5, agent.daemon_ca_file)
    except ReportConfigError as exc:
        log.error("enrol: %s", exc)
        return 2
    own = watcher is None
    watcher = watcher or make_watcher(agent)
    deadline = clock() + wait_s
    try:
        proof = watcher.identity(audience=agent.daemon_url)
        while True:
            status, answer = _ask(client, base + ENROLL_PATH, proof)
            if status == 200:
                return _keep(agent.daemon_token_file, answer, node)
            if status in (401, 403, 422):
                log.error("enrol: the daemon refused this node (HTTP %s): %s", status, answer.get("detail"))
                return 1
            if clock() >= deadline:
                log.error("enrol: no token within %.0f s (last: HTTP %s %s)", wait_s, status, answer.get("detail"))
                return 3
            log.info("enrol: not yet (HTTP %s: %s); asking again in %.0f s", status, answer.get("detail"), RETRY_S)
            sleep(RETRY_S)
    except WatchError as exc:
        log.error("enrol: %s", exc)
        return 3
    finally:
        client.close()
        if own:
            watcher.close()


def _ask(client: httpx.Client, url: str, proof: dict[str, str]) -> tuple[int, dict]:
    """(status, JSON answer); a transport error reads as 503, to be asked again."""
    try:
        r = client.post(url, json=proof)
    except httpx.TransportError as exc:
        return 503, {"detail": f"{type(exc).__name__}: {exc}"}
    try:
        body = r.json()
    except ValueError:
        body = {"detail": r.text[:200]}
    return r.status_code, body if isinstance(body, dict) else {"detail": str(body)[:200]}


def _keep(token_file: str, answer: dict, node: str | None) -> int:
    token = answer.get("token")
    ids = AgentCredentials.parse(token) if isinstance(token, str) else None
    if token is None or ids is None:
        log.error("enrol: the daemon's answer holds no agent token")
        return 1
    if node is not None and ids[1] != node:  # the tag names this node; a token for another would be of no use
        log.error("enrol: the daemon gave a token for node %s, this is %s", ids[1], node)
        return 1
    folder = os.path.dirname(os.path.abspath(token_file))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".agent-token.", dir=folder)  # 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, token_file)
    except BaseException:
        os.unlink(tmp)
        raise
    log.info("enrol: node %s (lease %s) holds its agent token in %s", ids[1], ids[0], token_file)
    return 0
