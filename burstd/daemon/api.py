"""The control API: HTTP (FastAPI) over a unix socket, optionally TCP with a bearer token.

Who may do what is decided from the connecting process's credentials (``SO_PEERCRED``), not only
from the socket file's mode:

* **read** (GET): root, the daemon's own user, members of ``api.socket_group`` or ``api.admin_group``;
* **admin** (pause, drain, terminate, budgets): root, the daemon's own user, members of ``admin_group``;
* **hook** (resume/suspend/resume-fail, agent notices): admins and the users in ``api.hook_users``.

The socket is created ``0660`` and group-owned by ``socket_group``. A TCP listener (``api.tcp_listen``)
serves the same app; there a valid ``Authorization: Bearer <token from api.token_file>`` counts as
admin and nothing else is accepted. The OpenAPI schema is at ``/openapi.json``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import grp
import hmac
import os
import pwd
import socket
import struct
import threading
from collections import Counter
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field
from uvicorn.protocols.http.h11_impl import H11Protocol

from burstd.config import ApiConfig, Config
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.intake import UnknownNode
from burstd.daemon.planning import notice_reason
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import OPEN_STATES, Lease, LeaseState
from burstd.domain.money import format_usd
from burstd.slurm.hostlist import HostlistError, expand

log = get_logger("api")
PEER_KEY = "burstd.peer"  # ASGI scope key: (pid, uid, gid) of the unix-socket peer
TOKEN_KEY = "burstd.token_ok"


# --------------------------------------------------------------------------------------------------
# Transport: put the peer's credentials into every request's scope
# --------------------------------------------------------------------------------------------------
class _PeerApp:
    def __init__(self, app, peer: tuple[int, int, int] | None):
        self.app = app
        self.peer = peer

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope[PEER_KEY] = self.peer
        return await self.app(scope, receive, send)


def peer_credentials(sock: socket.socket | None) -> tuple[int, int, int] | None:
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


class PeerCredH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, plus SO_PEERCRED of the connection in the ASGI scope."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        try:
            peer = peer_credentials(transport.get_extra_info("socket"))
        except OSError:
            peer = None
        self.app = _PeerApp(self.app, peer)


# --------------------------------------------------------------------------------------------------
# Authorization
# --------------------------------------------------------------------------------------------------
def _gid(name: str) -> int | None:
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
    def __init__(self, api: ApiConfig, token: str | None = None):
        self.api = api
        self.token = token
        self.own_uid = os.getuid()

    def role(self, request: Request) -> tuple[str, str]:
        """("admin" | "hook" | "read" | "none", who)."""
        peer = request.scope.get(PEER_KEY)
        if peer is None:
            if request.scope.get(TOKEN_KEY):
                return "admin", "token"
            return "none", "unauthenticated"
        _pid, uid, gid = peer
        who = f"uid {uid}"
        if uid == 0 or uid == self.own_uid:
            return "admin", who
        groups = user_groups(uid, gid)
        admin_gid = _gid(self.api.admin_group)
        if admin_gid is not None and admin_gid in groups:
            return "admin", who
        if uid in {u for u in (_uid(n) for n in self.api.hook_users) if u is not None}:
            return "hook", who
        read_gid = _gid(self.api.socket_group)
        if read_gid is not None and read_gid in groups:
            return "read", who
        return "none", who

    def need(self, level: str):
        order = {"none": 0, "read": 1, "hook": 2, "admin": 3}

        def dep(request: Request) -> str:
            role, who = self.role(request)
            ok = order[role] >= order[level] if level != "hook" else role in ("hook", "admin")
            if not ok:
                what = {"read": f"a member of group {self.api.socket_group!r}",
                        "hook": f"SlurmUser ({', '.join(self.api.hook_users)}) or an admin",
                        "admin": f"a member of group {self.api.admin_group!r}"}[level]
                raise HTTPException(403, f"permission denied for {who}: this call needs {what}")
            return who

        return Depends(dep)


# --------------------------------------------------------------------------------------------------
# Request bodies
# --------------------------------------------------------------------------------------------------
class HookJob(BaseModel):
    job_id: int
    nodes: str = ""  # every node of the job (22.05 ``nodes``, 23.02+ ``nodes_alloc``)
    priority: int | None = None  # 26.05+
    exclusive: str | None = None  # 26.05+: "NODE", "USER", ...


class HookCall(BaseModel):
    hostlist: str = Field(description="Slurm hostlist expression, e.g. cloud[1-3]")
    jobs: list[HookJob] = Field(default_factory=list, description="from SLURM_RESUME_FILE")
    t0: float | None = Field(default=None, description="when the hook process started (Unix time), for latency")


class NoticeCall(BaseModel):
    node: str
    kind: str = Field(default="spot-interruption", description="spot-interruption | rebalance | preempted")
    deadline: float | None = Field(default=None, description="Unix time the node goes away")
    detail: str = ""


class ReasonBody(BaseModel):
    reason: str = ""


class BudgetBody(BaseModel):
    # the Store validates it (negative, NaN, sub-micro-dollar: a 422 naming the account, nothing written)
    usd: str | int | float


def lease_dict(lease: Lease) -> dict[str, Any]:
    d = dataclasses.asdict(lease)
    d["state"] = lease.state.value
    d["job_ids"] = list(lease.job_ids)
    return d


# --------------------------------------------------------------------------------------------------
# The app
# --------------------------------------------------------------------------------------------------
def create_app(rec: Reconciler, config: Config, token: str | None = None, started_at: float = 0.0) -> FastAPI:
    access = Access(config.api, token)
    app = FastAPI(title="burstd control API", version="1", description=__doc__)
    read, admin, hook = access.need("read"), access.need("admin"), access.need("hook")

    def nodes_of(hostlist: str) -> list[str]:
        try:
            nodes = list(dict.fromkeys(expand(hostlist, validate=True)))  # each node once
        except HostlistError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            rec.check_nodes(nodes)
        except UnknownNode as exc:
            raise HTTPException(404, str(exc)) from None
        return nodes

    def hook_call(kind: str, body: HookCall) -> dict:
        try:
            nodes = nodes_of(body.hostlist)
        except HTTPException:
            rec.metrics.hook_calls.labels(kind, "rejected").inc()
            raise
        if kind == "resume":
            jobs: dict[str, list[int]] = {}
            for j in body.jobs:
                try:
                    for n in dict.fromkeys(expand(j.nodes, validate=True)) if j.nodes else []:
                        jobs.setdefault(n, []).append(j.job_id)
                except HostlistError as exc:
                    rec.metrics.hook_calls.labels(kind, "rejected").inc()
                    raise HTTPException(422, f"SLURM_RESUME_FILE job {j.job_id}: {exc}") from None
            out = rec.request_resume(nodes, {n: tuple(v) for n, v in jobs.items()}, hook_t0=body.t0)
        else:
            rec.add_intent(kind, nodes, f"{'SuspendProgram' if kind == 'suspend' else 'ResumeFailProgram'}")
            out = {"queued": nodes}
        rec.metrics.hook_calls.labels(kind, "ok").inc()
        log.info(f"hook {kind}", extra=ev(hostlist=body.hostlist, nodes=len(nodes),
                                          job_id=body.jobs[0].job_id if body.jobs else None))
        return out

    @app.get("/healthz", tags=["read"])
    def healthz() -> dict:
        return {"ok": True}

    @app.post("/v1/hooks/resume", tags=["hooks"], status_code=202)
    def hook_resume(body: HookCall, who: str = hook) -> dict:
        """ResumeProgram: record one REQUESTED lease per node (committed), wake the loop."""
        return hook_call("resume", body)

    @app.post("/v1/hooks/suspend", tags=["hooks"], status_code=202)
    def hook_suspend(body: HookCall, who: str = hook) -> dict:
        return hook_call("suspend", body)

    @app.post("/v1/hooks/resume-fail", tags=["hooks"], status_code=202)
    def hook_resume_fail(body: HookCall, who: str = hook) -> dict:
        return hook_call("resume-fail", body)

    @app.post("/v1/notices", tags=["hooks"], status_code=202)
    def notice(body: NoticeCall, who: str = hook) -> dict:
        """burstd-agent: a preemption notice for a node (drains its lease, wakes the loop)."""
        nodes = nodes_of(body.node)
        rec.add_intent("notice", nodes, notice_reason(body.kind, body.deadline, body.detail))
        log.warning("preemption notice", extra=ev(node=body.node, kind=body.kind, deadline=body.deadline))
        return {"queued": nodes}

    def _pool_health() -> dict:
        try:
            return rec.health.status()
        except Exception as exc:  # noqa: BLE001 - status must answer even if the settings are unreadable
            return {"error": str(exc)}

    def _pause_state() -> dict | None:
        """Who paused or resumed bursting, why and when (None: nobody did; the config decides)."""
        state = rec.store.pause_state()
        return None if state is None else dataclasses.asdict(state)

    @app.get("/v1/status", tags=["read"])
    def status(who: str = read) -> dict:
        leases = rec.store.leases(states=OPEN_STATES)
        snap = rec.last_snapshot
        by_node = {lease.node_name: lease for lease in sorted(leases, key=lambda x: x.created_at)}
        clouds = {p.partition for p in config.pools}
        pending = snap.pending if snap else []
        nodes = []
        if snap:
            for n in snap.nodes:
                if config.pool_of_node(n.name) is None:
                    continue
                lease = by_node.get(n.name)
                nodes.append({"name": n.name, "state": n.state, "flags": list(n.flags),
                              "lease_state": lease.state.value if lease else None,
                              "lease_id": lease.lease_id if lease else None})
        by_part = Counter(p for j in pending for p in j.partitions)
        return {
            "cluster": config.cluster.id,
            "paused": rec.paused(),
            "pause": _pause_state(),
            "decider": rec.decider_name,
            "uptime_s": round(rec.clock() - started_at, 1) if started_at else None,
            "pools": [{"name": p.name, "provider": p.provider, "partition": p.partition,
                       "nodes": f"{p.node_prefix}[1-{p.node_count}]", "price_per_hour": p.price_per_hour}
                      for p in config.pools],
            "leases_by_state": dict(Counter(lease.state.value for lease in leases)),
            "queue": {
                "pending_jobs": len(pending),
                "pending_by_partition": dict(by_part),
                "burst_eligible_jobs": sum(1 for j in pending if set(j.partitions) & clouds),
                "running_jobs": len(snap.running) if snap else 0,
                "snapshot_at": snap.taken_at if snap else None,
            },
            "nodes": nodes,
            "pool_health": _pool_health(),
            "last_cycle": rec.last_report.as_dict() if rec.last_report else None,
        }

    @app.get("/v1/leases", tags=["read"])
    def leases(state: str | None = None, all: bool = False, who: str = read) -> list[dict]:
        if state:
            try:
                states = {LeaseState(s.strip().upper()) for s in state.split(",")}
            except ValueError:
                raise HTTPException(422, f"unknown lease state in {state!r}; "
                                         f"known: {', '.join(s.value for s in LeaseState)}") from None
        else:
            states = set(LeaseState) if all else set(OPEN_STATES)
        return [lease_dict(x) for x in rec.store.leases(states=frozenset(states))]

    @app.get("/v1/events", tags=["read"])
    def events(lease_id: str | None = None, limit: int = 100, who: str = read) -> list[dict]:
        rows = rec.store.events(lease_id=lease_id, limit=limit)
        return [r if isinstance(r, dict) else (dataclasses.asdict(r) if dataclasses.is_dataclass(r) else
                                                   getattr(r, "model_dump", lambda: dict(r))()) for r in rows]

    @app.get("/v1/explain/{job_id}", tags=["read"])
    def explain(job_id: int, who: str = read) -> dict:
        """Why a job bursts or not, from the last cycle's snapshot and decisions."""
        snap = rec.last_snapshot
        if snap is None:
            raise HTTPException(503, "no Slurm snapshot yet: the first cycle has not run")
        from burstd.policy.explain import explain_job

        leases = rec.store.leases(states=OPEN_STATES)
        if rec.last_decisions is not None:
            result = explain_job(job_id, snap, decisions=rec.last_decisions, leases=leases, config=config,
                                 now=rec.clock())
        else:  # no decision yet (first cycle, or the decider failed): run the daemon's decider afresh (pure)
            try:
                decisions = rec.decider(snap, list(leases), rec.budget_book(), rec.prices(), config, rec.clock())
            except Exception as exc:  # noqa: BLE001 - e.g. PriceError naming a pool
                raise HTTPException(503, f"cannot explain job {job_id}: {exc}") from None
            result = explain_job(job_id, snap, decisions=decisions, leases=leases, config=config, now=rec.clock())
        return result.as_dict()

    @app.post("/v1/pause", tags=["admin"])
    def pause(body: ReasonBody | None = None, who: str = admin) -> dict:
        reason = body.reason if body else ""
        state = rec.store.set_pause(True, reason=reason, by=who)
        log.warning("bursting paused", extra=ev(by=who, reason=reason))
        rec.wake()
        return {"paused": True, "reason": state.reason, "by": state.by, "since": state.since}

    @app.post("/v1/resume", tags=["admin"])
    def resume(who: str = admin) -> dict:
        state = rec.store.set_pause(False, by=who)
        log.warning("bursting resumed", extra=ev(by=who))
        rec.wake()
        return {"paused": False, "by": state.by, "since": state.since}

    @app.post("/v1/pools/{pool}/unprotect", tags=["admin"])
    def unprotect(pool: str, who: str = admin) -> dict:
        if pool not in {p.name for p in config.pools}:
            raise HTTPException(404, f"no pool {pool!r} in this daemon's config")
        try:
            was = rec.health.unprotect(pool)
        except LookupError as exc:
            raise HTTPException(409, str(exc)) from None
        log.warning("pool unprotected by admin", extra=ev(by=who, pool=pool, reason=f"was: {was}"))
        rec.wake()
        return {"pool": pool, "protected": False, "was": was}

    @app.post("/v1/nodes/{node}/drain", tags=["admin"], status_code=202)
    def drain(node: str, body: ReasonBody | None = None, who: str = admin) -> dict:
        nodes = nodes_of(node)
        rec.add_intent("drain", nodes, (body.reason if body and body.reason else f"drained by {who}")[:200])
        return {"queued": nodes}

    @app.post("/v1/nodes/{node}/terminate", tags=["admin"], status_code=202)
    def terminate(node: str, body: ReasonBody | None = None, who: str = admin) -> dict:
        nodes = nodes_of(node)
        rec.add_intent("terminate", nodes, (body.reason if body and body.reason else f"terminated by {who}")[:200])
        return {"queued": nodes}

    @app.put("/v1/budgets/{account}", tags=["admin"])
    def set_budget(account: str, body: BudgetBody, who: str = admin) -> dict:
        from burstd.daemon.budgets import slurmdbd_accounts, unknown_account_error, unknown_account_warning
        from burstd.slurm.base import SlurmError, check_name

        try:
            check_name("account", account)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            known = slurmdbd_accounts(rec.adapter)
        except SlurmError as exc:  # slurmdbd configured but not answering: refuse rather than guess
            raise HTTPException(503, f"cannot ask Slurm's accounting about account {account!r}: {exc}") from None
        refused = unknown_account_error(account, known)
        if refused:
            raise HTTPException(422, refused)
        warning = unknown_account_warning(account, rec, config) if known is None else None
        try:
            entry = rec.store.set_budget(account, body.usd, period=config.budget.period)
        except ValueError as exc:  # BudgetError: negative, NaN, not a number... nothing was written
            raise HTTPException(422, str(exc)) from None
        log.warning("budget set", extra=ev(account=account, usd=str(body.usd), by=who, warning=warning))
        out = {"account": account, "usd": format_usd(entry.limit_micros), "limit_micros": entry.limit_micros}
        if warning:
            out["warning"] = warning
        return out

    @app.get("/v1/budgets", tags=["read"])
    def budgets(who: str = read) -> dict:
        book = rec._budget_book()
        if book is None:
            return {"accounts": {k: {"limit": v} for k, v in config.budget.accounts.items()}}
        return {
            "period_start": book.period_start, "period_end": book.period_end,
            "site": {"limit": None if book.site_limit_micros is None else format_usd(book.site_limit_micros),
                     "spent": format_usd(book.site_spent_micros)},
            "accounts": {a: {"limit_micros": b.limit_micros, "spent_micros": b.spent_micros,
                             "limit": None if b.limit_micros is None else format_usd(b.limit_micros),
                             "spent": format_usd(b.spent_micros)} for a, b in book.accounts.items()},
        }

    @app.get("/v1/spend", tags=["read"])
    def spend(by: str = "account", since: float | None = None, who: str = read) -> Any:
        if by not in ("account", "user", "job", "pool"):
            raise HTTPException(422, f"by must be account, user, job or pool, not {by!r}")
        return rec.store.spend(by=by, since=since)

    @app.get("/v1/spend/reconcile", tags=["read"])
    def spend_reconcile(since: float | None = None, who: str = read) -> dict:
        """burstd's spend per job against the jobs slurmdbd recorded on the cloud nodes; differences listed."""
        from burstd.daemon.sacct_check import NoAccounting, reconcile_spend
        from burstd.slurm.base import SlurmError

        try:
            return reconcile_spend(rec.store, rec.adapter, config, since, now=rec.clock())
        except NoAccounting as exc:
            raise HTTPException(409, str(exc)) from None
        except SlurmError as exc:
            raise HTTPException(503, f"sacct: {exc}") from None

    @app.get("/v1/spend/series", tags=["read"])
    def spend_series(by: str = "account", since: float | None = None, who: str = read) -> list:
        """[(interval start, key, micro-dollars)] sorted by time: what ``burstctl spend --plot`` draws."""
        if by not in ("account", "user", "job", "pool"):
            raise HTTPException(422, f"by must be account, user, job or pool, not {by!r}")
        return [[t, k, c] for t, k, c in rec.store.spend_series(by=by, since=since)]

    @app.get("/metrics", tags=["read"])
    def metrics(who: str = read) -> PlainTextResponse:
        return PlainTextResponse(rec.metrics.render().decode(), media_type="text/plain; version=0.0.4")

    @app.exception_handler(NotImplementedError)
    async def not_implemented(request: Request, exc: NotImplementedError) -> JSONResponse:
        return JSONResponse({"detail": f"not available in this build: {exc}"}, status_code=501)

    return app


# --------------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------------
def bind_unix_socket(path: str, group: str) -> socket.socket:
    """Bind ``path`` (replacing a stale socket), mode 0660, group ``group``."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    gid = _gid(group)
    if gid is None:
        sock.close()
        raise ValueError(f"api.socket_group: no such group {group!r}")
    os.chown(path, -1, gid)
    os.chmod(path, 0o660)
    sock.listen(128)
    return sock


class _TokenApp:
    def __init__(self, app, token: str):
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope.get("headers") or []).get(b"authorization", b"")
            scope[TOKEN_KEY] = auth.startswith(b"Bearer ") and hmac.compare_digest(auth[7:].strip(), self.token)
            scope[PEER_KEY] = None
        return await self.app(scope, receive, send)


class ApiServer:
    """Runs uvicorn in a thread on the unix socket (and optionally TCP)."""

    def __init__(self, app: FastAPI, config: Config):
        self.app = app
        self.config = config
        self._servers: list[uvicorn.Server] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        api = self.config.api
        sock = bind_unix_socket(api.socket, api.socket_group)
        cfg = uvicorn.Config(self.app, http=PeerCredH11Protocol, lifespan="off", log_config=None,
                             access_log=False, timeout_keep_alive=5, ws="none")
        self._spawn(uvicorn.Server(cfg), [sock])
        if api.tcp_listen:
            with open(api.token_file) as fh:  # type: ignore[arg-type]
                token = fh.read().strip()
            if not token:
                raise ValueError(f"api.token_file {api.token_file}: empty token")
            host, _, port = api.tcp_listen.rpartition(":")
            tcp = socket.create_server((host or "127.0.0.1", int(port)))
            tcfg = uvicorn.Config(_TokenApp(self.app, token), lifespan="off", log_config=None, access_log=False,
                                  ws="none")
            self._spawn(uvicorn.Server(tcfg), [tcp])

    def _spawn(self, server: uvicorn.Server, sockets: list[socket.socket]) -> None:
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  (older uvicorn)
        t = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=sockets)), name="burstd-api",
                             daemon=True)
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    def wait_started(self, timeout: float = 10.0) -> bool:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.started for s in self._servers):
                return True
            time.sleep(0.01)
        return False

    def stop(self) -> None:
        for s in self._servers:
            s.should_exit = True
        for t in self._threads:
            t.join(timeout=5)
        try:
            os.unlink(self.config.api.socket)
        except OSError:
            pass
