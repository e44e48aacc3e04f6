"""Who is calling the control API, and the gate that decides before a request body is read.

Roles, from the connection (never from the body):

* unix socket: the peer's ``SO_PEERCRED`` uid/groups give **admin** (root, the daemon's user,
  ``api.admin_group``), **hook** (``api.hook_users``: SlurmUser, an on-head agent) or **read**
  (``api.socket_group``);
* TCP (TLS): ``Authorization: Bearer`` with the admin token (``api.token_file``) is **admin**; a node's
  agent token (``burstd.daemon.agent_auth``) is **agent**, for that node only and only while its lease is
  open. Nothing else is accepted, and /docs and /openapi.json need a role like any other read.

:class:`Gate` wraps the ASGI app: it finds the route's level (from the route's tag), answers 401/403 before
one byte of the body is read, refuses a body over ``api.max_body_bytes`` (413, from Content-Length, or as
soon as the stream passes it), and only then hands the buffered body to the app. A hostile client can
therefore neither make the daemon parse a huge body nor hold a worker while it uploads one.
"""

from __future__ import annotations

import asyncio
import grp
import hmac
import json
import os
import pwd
from collections.abc import Callable, MutableMapping
from typing import Any
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from starlette.routing import Match

from burstd.config import ApiConfig
from burstd.daemon.job_credentials import JobCaller, MungeRefused

PEER_KEY = "burstd.peer"  # ASGI scope key: (pid, uid, gid) of the unix-socket peer; None on TCP
PRINCIPAL_KEY = "burstd.principal"
JOB_CALLER_KEY = "burstd.job_caller"  # ASGI scope key: the JobCaller a MUNGE credential proved (role "job")

# what each route tag needs; agent tokens reach only routes tagged "agent"
LEVELS = {"public": 0, "read": 1, "node_read": 1, "agent": 2, "hooks": 2, "admin": 3, "job": 2}
RANK = {"none": 0, "read": 1, "agent": 0, "ended_agent": 0, "hook": 2, "admin": 3, "job": 0}


@dataclass(frozen=True)
class Principal:
    role: str  # "admin" | "hook" | "read" | "agent" | "ended_agent" | "none"
    who: str  # for logs and refusals: "uid 1000", "token", "agent of cloud3"
    node: str | None = None  # agent: the one node it may speak for
    lease: str | None = None  # agent, ended_agent: the lease its token was minted for

    def may(self, level: str) -> bool:
        if level == "public":
            return True
        if level == "agent":  # notices: hooks and admins, and a node's own agent
            return self.role in ("agent", "hook", "admin")
        if level == "job":  # a job's report on itself: a MUNGE credential, and nothing else
            return self.role == "job"
        if level == "node_read":  # readers, and a node's agent for its own lease (the route keeps it to that)
            return self.role in ("agent", "ended_agent") or RANK[self.role] >= LEVELS["read"]
        return RANK[self.role] >= LEVELS[level]


def group_id(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def _uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def user_groups(uid: int, gid: int) -> set[int]:
    groups = {gid}
    try:
        pw = pwd.getpwuid(uid)
        groups |= set(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except KeyError:
        pass
    return groups


class Access:
    """The role of a connection: peer credentials on the unix socket, a bearer token on TCP."""

    def __init__(self, api: ApiConfig, token: str | None = None,
                 agent_node: Callable[[str], str | None] | None = None,
                 job_caller: Callable[[str], JobCaller] | None = None,
                 agent_ids: Callable[[str], tuple[str, str] | None] | None = None):
        self.api = api
        self.token = token.encode() if token else None
        self.agent_node = agent_node  # agent token -> its node while the lease is open, else None
        # agent token -> (lease id, node) if the daemon minted it, open lease or not: a node whose lease is over
        # may still learn that much (its dead-man switch then powers it off), and nothing else
        self.agent_ids = agent_ids
        self.job_caller = job_caller  # MUNGE credential -> who made it, where (MungeRefused if not good)
        self.own_uid = os.getuid()

    def set_token(self, token: str) -> None:
        self.token = token.encode()

    def principal(self, scope: MutableMapping[str, Any]) -> Principal:
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        if auth.startswith(b"Munge ") and self.job_caller is not None:
            return self._munge(scope, auth[6:].strip())
        peer = scope.get(PEER_KEY)
        if peer is not None:
            return self._peer(peer)
        if not auth.startswith(b"Bearer "):
            return Principal("none", "unauthenticated")
        presented = auth[7:].strip()
        if self.token and hmac.compare_digest(presented, self.token):
            return Principal("admin", "token")
        if self.agent_node is not None:
            try:
                text = presented.decode("ascii")
            except UnicodeDecodeError:
                return Principal("none", "a bad or revoked token")
            ids = self.agent_ids(text) if self.agent_ids is not None else None
            node = self.agent_node(text)
            if node:
                return Principal("agent", f"agent of {node}", node, lease=ids[0] if ids else None)
            if ids:
                return Principal("ended_agent", f"agent of {ids[1]} (lease {ids[0]} is over)", ids[1], lease=ids[0])
        return Principal("none", "a bad or revoked token")

    def _munge(self, scope: MutableMapping[str, Any], credential: bytes) -> Principal:
        """A job's own credential: the "job" role (its progress report only), whatever the transport."""
        assert self.job_caller is not None
        if isinstance(scope.get(JOB_CALLER_KEY), JobCaller):  # decoded once: a second unmunge reads as a replay
            caller = scope[JOB_CALLER_KEY]
            return Principal("job", f"uid {caller.uid} on {caller.host} (munge)")
        try:
            caller = self.job_caller(credential.decode("ascii"))
        except (UnicodeDecodeError, MungeRefused) as exc:
            return Principal("none", f"a refused MUNGE credential ({exc or 'not ASCII'})")
        scope[JOB_CALLER_KEY] = caller
        return Principal("job", f"uid {caller.uid} on {caller.host} (munge)")

    def _peer(self, peer: tuple[int, int, int]) -> Principal:
        _pid, uid, gid = peer
        who = f"uid {uid}"
        if uid == 0 or uid == self.own_uid:
            return Principal("admin", who)
        groups = user_groups(uid, gid)
        admin_gid = group_id(self.api.admin_group)
        if admin_gid is not None and admin_gid in groups:
            return Principal("admin", who)
        if uid in {u for u in (_uid(n) for n in self.api.hook_users) if u is not None}:
            return Principal("hook", who)
        read_gid = group_id(self.api.socket_group)
        if read_gid is not None and read_gid in groups:
            return Principal("read", who)
        return Principal("none", who)

    def needs(self, level: str) -> str:
        return {"read": f"a member of group {self.api.socket_group!r}",
                "node_read": f"a member of group {self.api.socket_group!r}, or a node's agent for its own node",
                "agent": f"SlurmUser ({', '.join(self.api.hook_users)}), the node's agent or an admin",
                "hooks": f"SlurmUser ({', '.join(self.api.hook_users)}) or an admin",
                "admin": f"a member of group {self.api.admin_group!r}",
                "job": "the job's own MUNGE credential (Authorization: Munge ...)"}.get(level, level)

    def check(self, request: Request, level: str) -> Principal:
        p = request.scope.get(PRINCIPAL_KEY) or self.principal(request.scope)
        if not p.may(level):
            raise HTTPException(403, f"permission denied for {p.who}: this call needs {self.needs(level)}")
        return p

    def need(self, level: str):
        """A FastAPI dependency (a second check behind the gate): who is calling, or 403."""

        def who(request: Request) -> str:
            return self.check(request, level).who

        return Depends(who)

    def need_principal(self, level: str):
        def principal(request: Request) -> Principal:
            return self.check(request, level)

        return Depends(principal)


def route_level(app, scope: dict) -> str:
    """The level of the route this request goes to (its first tag); unknown routes: read for GET, else admin."""
    for route in app.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            tags = getattr(route, "tags", None) or []
            if tags and tags[0] in LEVELS:
                return tags[0]
            return "read"  # /openapi.json, /docs, /redoc: never anonymous
    return "read" if scope.get("method") in ("GET", "HEAD") else "admin"


class Gate:
    """ASGI middleware: authorize, then cap and buffer the body, then call the app (see the module doc)."""

    def __init__(self, app, access: Access, max_body: int):
        self.app = app
        self.access = access
        self.max_body = max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if dict(scope.get("headers") or []).get(b"authorization", b"").startswith(b"Munge "):
            # unmunge is a process (about 20 ms on a loaded head node): off the event loop, so hooks are not held
            principal = await asyncio.to_thread(self.access.principal, scope)
        else:
            principal = self.access.principal(scope)
        scope[PRINCIPAL_KEY] = principal
        level = route_level(self.app, scope)
        if not principal.may(level):
            status = 401 if principal.role in ("none", "ended_agent") and scope.get(PEER_KEY) is None else 403
            return await _answer(send, status, f"permission denied for {principal.who}: this call needs "
                                               f"{self.access.needs(level)}")
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return await _answer(send, 413, f"request body over {self.max_body} bytes (api.max_body_bytes)")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body:
                return await _answer(send, 413, f"request body over {self.max_body} bytes (api.max_body_bytes)")
            chunks.append(body)
            if not message.get("more_body"):
                break
        buffered = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": buffered, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def _answer(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
