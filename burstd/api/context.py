"""What every router of the control API is built with: the daemon's two doors (``DaemonControl`` for queries and
admin commands, the intake's ``IntakePort`` for requests the cycle applies), the rights each
audience needs (FastAPI dependencies from ``auth.Access``), the agent credentials, and the one hostlist check."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import HTTPException

from burstd.config import Config
from burstd.daemon.agent_auth import AgentCredentials
from burstd.daemon.control import DaemonControl
from burstd.daemon.intake import UnknownNode
from burstd.daemon.planning import ResumeJob
from burstd.domain.hostlist import HostlistError, expand


class IntakePort(Protocol):
    """What the hooks, the agent and admins ask of the daemon between cycles (``daemon.intake.Intake``, called
    directly): record durably, wake the cycle, return. ``UnknownNode`` for a node in no pool."""

    def check_nodes(self, nodes: Sequence[str]) -> None: ...

    def request_resume(self, nodes: Sequence[str], jobs: dict[str, tuple[int, ...]] | None = None,
                       hook_t0: float | None = None, info: Mapping[int, ResumeJob] | None = None,
                       wait_s: float | None = None) -> dict: ...

    def add_intent(self, kind: str, nodes: Sequence[str], reason: str = "") -> None:
        """suspend, resume-fail, notice, drain, terminate or parity: applied by the next cycle."""


@dataclass(frozen=True)
class RouteContext:
    ctl: DaemonControl  # the daemon's queries and admin commands
    intake: IntakePort  # the requests the cycle applies (resume, intents)
    config: Config
    credentials: Callable[[], AgentCredentials]  # loaded on first use (makes <state_dir>/agent.key once)
    # FastAPI dependencies, one per level (auth.Access.need / need_principal): who is calling, or 403
    read: Any
    node_read: Any  # a reader, or a node's agent (a Principal: the route keeps an agent to its own node)
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
            self.intake.check_nodes(nodes)
        except UnknownNode as exc:
            raise HTTPException(404, str(exc)) from None
        return nodes
