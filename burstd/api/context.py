"""What every router of the control API is built with: the daemon's one door (``DaemonControl``), the rights each
audience needs (FastAPI dependencies from ``auth.Access``), the agent credentials, and the one hostlist check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from burstd.config import Config
from burstd.daemon.agent_auth import AgentCredentials
from burstd.daemon.control import DaemonControl
from burstd.daemon.intake import UnknownNode
from burstd.domain.hostlist import HostlistError, expand


@dataclass(frozen=True)
class RouteContext:
    ctl: DaemonControl  # the only way into the daemon from here
    config: Config
    credentials: Callable[[], AgentCredentials]  # loaded on first use (makes <state_dir>/agent.key once)
    # FastAPI dependencies, one per level (auth.Access.need / need_principal): who is calling, or 403
    read: Any
    admin: Any
    hook: Any
    agent: Any
    job: Any  # a job's own MUNGE credential: its progress report, nothing else

    def nodes_of(self, hostlist: str) -> list[str]:
        """The nodes of a hostlist, each once: 422 for a bad expression, 404 for a node the daemon does not know."""
        try:
            nodes = list(dict.fromkeys(expand(hostlist, validate=True)))  # each node once
        except HostlistError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            self.ctl.check_nodes(nodes)
        except UnknownNode as exc:
            raise HTTPException(404, str(exc)) from None
        return nodes
