"""The control API: HTTP (FastAPI) over a unix socket, optionally TCP with a bearer token.

Who may do what is decided from the connecting process's credentials (``SO_PEERCRED``), not only
from the socket file's mode:

* **read** (GET): root, the daemon's own user, members of ``api.socket_group`` or ``api.admin_group``;
* **admin** (pause, drain, terminate, budgets): root, the daemon's own user, members of ``admin_group``;
* **hook** (resume/suspend/resume-fail, agent notices): admins and the users in ``api.hook_users``;
* **agent** (TCP only): notices and parity-gate results for its own node while its lease is open, and the
  parity gate's settings (``GET /v1/parity``).

The socket is created ``0660`` and group-owned by ``socket_group``. A TCP listener (``api.tcp_listen``)
serves the same app over TLS only; there the admin token (``api.token_file``) counts as admin and a node's
agent token (``burstd.daemon.agent_auth``) may post notices for its own node while its lease is open.
Rights are checked before a body is read, and bodies are capped (``burstd.api.auth.Gate``). The
OpenAPI schema is at ``/openapi.json`` (for callers with read rights, like every other read).
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from burstd.api.auth import Access
from burstd.api.context import RouteContext
from burstd.api.routers import admin, agent, enroll, hooks, progress, read
from burstd.config import Config
from burstd.daemon.agent_auth import AgentCredentials
from burstd.daemon.control import DaemonControl
from burstd.daemon.job_credentials import verify_munge
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.reconcile import Reconciler
from burstd.domain.store_errors import StoreError

log = get_logger("api")


def create_app(rec: Reconciler, config: Config, token: str | None = None, started_at: float = 0.0) -> FastAPI:
    ctl = DaemonControl(rec, config, started_at)  # with rec.intake, the only ways into the daemon from here
    creds: list[AgentCredentials] = []  # loaded on first use (makes <state_dir>/agent.key once)

    def credentials() -> AgentCredentials:
        if not creds:
            os.makedirs(config.daemon.state_dir, exist_ok=True)
            creds.append(AgentCredentials.load(config.daemon.state_dir))
        return creds[0]

    access = Access(config.api, token, agent_node=lambda t: credentials().live_node(ctl.lease)(t),
                    job_caller=lambda c: verify_munge(c, socket=config.api.munge_socket),
                    agent_ids=lambda t: credentials().verify(t))
    app = FastAPI(title="burstd control API", version="1", description=__doc__)
    app.state.access = access
    ctx = RouteContext(ctl, rec.intake, config, credentials, read=access.need("read"),
                       node_read=access.need_principal("node_read"), admin=access.need("admin"),
                       hook=access.need("hooks"), agent=access.need_principal("agent"), job=access.need("job"))
    # Each audience adds its routes to the app itself, not through include_router: FastAPI (0.165) nests an
    # included router as one opaque route, and the gate (auth.route_level) reads each route's first tag, the
    # level it needs, from app.routes before any body is read.
    for audience in (hooks, agent, enroll, read, admin, progress):
        audience.register(app, ctx)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # what was wrong and where, without echoing the input: it may be huge, or NaN (not JSON at all)
        detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        # e.g. StoreBusy outside a hook; never a bare 500 with no word on what happened
        log.error("store error", extra=ev(path=request.url.path, error=str(exc)))
        return JSONResponse({"detail": f"database: {exc}"}, status_code=503)

    @app.exception_handler(SQLAlchemyError)
    async def database_error(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        log.error("database error", extra=ev(path=request.url.path, error=str(exc)[:500]))
        return JSONResponse({"detail": f"database unavailable ({exc.__class__.__name__}); nothing was changed by "
                                       "this call unless a later read shows it"}, status_code=503)

    @app.exception_handler(NotImplementedError)
    async def not_implemented(request: Request, exc: NotImplementedError) -> JSONResponse:
        return JSONResponse({"detail": f"not available in this build: {exc}"}, status_code=501)

    return app
