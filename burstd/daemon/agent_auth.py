"""Agent credentials: one per lease, good for that lease's node only, dead when the lease ends.

    creds = AgentCredentials.load(state_dir)            # <state_dir>/agent.key, 32 random bytes, 0600
    token = creds.token_for(lease)                      # handed to the node's bootstrap (never an admin token)
    creds.verify(token) -> ("lease-id", "cloud3") | None
    mint = token_minter(state_dir); mint(lease)         # the launch's: loads the key on first use only

A token is ``burstd-agent.v1.<lease id>.<node>.<HMAC-SHA256(key, lease id + node)>``: the daemon stores nothing
per token, a node cannot mint one for another node or lease, and the API accepts one only while its lease is
open (``live_node``), so terminating the lease revokes it. Rotating ``agent.key`` revokes them all.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from burstd.domain.lease import OPEN_STATES, Lease
from burstd.secure_files import read_secret

PREFIX = "burstd-agent.v1"
_TOKEN = re.compile(r"^burstd-agent\.v1\.(?P<lease>[A-Za-z0-9_-]{1,128})\.(?P<node>[A-Za-z0-9_-]{1,128})"
                    r"\.(?P<mac>[0-9a-f]{64})$")


class AgentCredentials:
    def __init__(self, key: bytes):
        if len(key) < 32:
            raise ValueError("the agent key must be at least 32 bytes")
        self._key = key

    @classmethod
    def load(cls, state_dir: str | os.PathLike) -> AgentCredentials:
        """The daemon's agent key (made on first use, 0600; the same file for every daemon sharing the dir).

        A key that is there already must be ours and private (``secure_files.read_secret``): a key another user
        pre-made in the state dir would let them mint any node's token."""
        path = Path(state_dir) / "agent.key"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(32))
        return cls(read_secret(f"{path}", path))

    def _mac(self, lease_id: str, node: str) -> str:
        return hmac.new(self._key, f"{lease_id}\n{node}".encode(), hashlib.sha256).hexdigest()

    def token_for(self, lease: Lease) -> str:
        if not _TOKEN.fullmatch(f"{PREFIX}.{lease.lease_id}.{lease.node_name}.{'0' * 64}"):
            raise ValueError(f"lease {lease.lease_id!r} / node {lease.node_name!r} cannot carry an agent token")
        return f"{PREFIX}.{lease.lease_id}.{lease.node_name}.{self._mac(lease.lease_id, lease.node_name)}"

    @staticmethod
    def parse(token: str) -> tuple[str, str] | None:
        """The (lease id, node) a token names, if it has a token's shape; only ``verify`` says it is genuine."""
        m = _TOKEN.fullmatch(token)
        return (m["lease"], m["node"]) if m else None

    def verify(self, token: str) -> tuple[str, str] | None:
        m = _TOKEN.fullmatch(token)
        if not m or not hmac.compare_digest(m["mac"], self._mac(m["lease"], m["node"])):
            return None
        return m["lease"], m["node"]

    def live_node(self, lease_of: Callable[[str], Lease | None]) -> Callable[[str], str | None]:
        """token -> its node, if the token is genuine and its lease is still open (else None)."""

        def node(token: str) -> str | None:
            ids = self.verify(token)
            if ids is None:
                return None
            lease = lease_of(ids[0])
            if lease is None or lease.state not in OPEN_STATES or lease.node_name != ids[1]:
                return None
            return ids[1]

        return node


def token_minter(state_dir: str | os.PathLike) -> Callable[[Lease], str]:
    """``lease -> its token``, loading the key on the first call: a launch hands the token to providers that
    deliver it to the node at boot (``Provider.wants_agent_token``), and a daemon whose providers never ask
    makes no key."""
    creds: list[AgentCredentials] = []

    def mint(lease: Lease) -> str:
        if not creds:
            creds.append(AgentCredentials.load(state_dir))
        return creds[0].token_for(lease)

    return mint
