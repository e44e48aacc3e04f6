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
Rights are checked before a body is read, and bodies are capped (``burstd.daemon.api_auth.Gate``). The
OpenAPI schema is at ``/openapi.json`` (for callers with read rights, like every other read).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field, field_validator
from sqlalchemy.exc import SQLAlchemyError

from burstd.config import Config
from burstd.daemon import api_progress
from burstd.daemon.agent_auth import AgentCredentials
from burstd.daemon.job_credentials import verify_munge
from burstd.daemon.api_auth import Access, Principal
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.intake import UnknownNode
from burstd.daemon.planning import ResumeJob, notice_reason
from burstd.daemon.control import DaemonControl, NotReady
from burstd.daemon.reconcile import Reconciler
from burstd.db.engine import lock_wait
from burstd.domain.store_errors import StoreBusy, StoreError
from burstd.domain.lease import OPEN_STATES, Lease, LeaseState
from burstd.domain.budget import NO_ACCOUNT
from burstd.domain.jobref import MAX_JOB_ID, JobRefError, parse_job_ref
from burstd.domain.parity import reason_of as parity_reason
from burstd.report.job_history import STATES as JOB_STATES
from burstd.slurm.base import MAX_REASON, check_reason
from burstd.domain.hostlist import HostlistError, expand

log = get_logger("api")


# --------------------------------------------------------------------------------------------------
# Request bodies
# --------------------------------------------------------------------------------------------------
MIN_HOOK_LEFT_S = 0.05  # less than this left before the hook's deadline: too late to record and answer
SINCE = Query(None, ge=0, le=4_102_444_800, allow_inf_nan=False, description="Unix time")
# its own Query object: with SINCE shared by both parameters, ?until answered with the value of ?since
UNTIL = Query(None, ge=0, le=4_102_444_800, allow_inf_nan=False, description="Unix time")


class HookJob(BaseModel):
    # strict: an id is an integer, never a float or a bool read as one
    job_id: int = Field(ge=1, le=MAX_JOB_ID, strict=True)
    nodes: str = Field(default="", max_length=65536)
    priority: int | None = Field(default=None, ge=0, le=MAX_JOB_ID, strict=True)  # 26.05+
    exclusive: str | None = Field(default=None, max_length=64)  # 26.05+: "NODE", "USER", ...


class HookCall(BaseModel):
    hostlist: str = Field(description="Slurm hostlist expression, e.g. cloud[1-3]")
    jobs: list[HookJob] = Field(default_factory=list, description="from SLURM_RESUME_FILE")
    t0: float | None = Field(default=None, ge=0, le=4_102_444_800, allow_inf_nan=False,
                             description="when the hook process started (Unix time), for latency")
    timeout_s: float | None = Field(default=None, gt=0, le=30, allow_inf_nan=False,
                                    description="how long the hook waits for this answer")
    deadline: float | None = Field(default=None, ge=0, le=4_102_444_800, allow_inf_nan=False,
                                   description="Unix time the hook gives up: past it, nothing is recorded")


class NoticeCall(BaseModel):
    node: str = Field(max_length=256)
    kind: str = Field(default="spot-interruption", pattern=r"^[a-z][a-z-]{0,39}$",
                      description="spot-interruption | rebalance | preempted")
    deadline: float | None = Field(default=None, ge=0, le=4_102_444_800, allow_inf_nan=False,
                                   description="Unix time the node goes away")
    detail: str = ""

    @field_validator("detail")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return check_reason(value)  # the adapter's own rule: what is accepted here, Slurm will take


class GcBody(BaseModel):
    """``burstctl cloud gc``: list the orphans (``dry_run``), or queue their collection for the leader."""

    dry_run: bool = False
    grace_s: float | None = Field(None, ge=0, le=365 * 86400)  # None: daemon.orphan_grace_s
    pool: str | None = Field(None, max_length=64)  # None: every pool


class ParityCall(BaseModel):
    node: str = Field(max_length=256)
    differences: list[str] = Field(min_length=1, max_length=1000,
                                   description="each difference in words (burstd.domain.parity.Difference.message)")


class ReasonBody(BaseModel):
    reason: str = ""

    @field_validator("reason")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return check_reason(value)


class BudgetBody(BaseModel):
    # the Store validates it (negative, NaN, sub-micro-dollar: a 422 naming the account, nothing written)
    usd: str | int | float


def lease_dict(lease: Lease) -> dict[str, Any]:
    d = dataclasses.asdict(lease)
    d["state"] = lease.state.value
    d["job_ids"] = list(lease.job_ids)
    return unit_named(d)


def unit_named(data: Any) -> Any:
    """JSON money says its unit: the domain's ``*_micros`` fields go out as ``*_micro_usd``."""
    if isinstance(data, dict):
        return {(k[: -len("_micros")] + "_micro_usd" if isinstance(k, str) and k.endswith("_micros") else k):
                unit_named(v) for k, v in data.items()}
    if isinstance(data, list):
        return [unit_named(v) for v in data]
    return data


# --------------------------------------------------------------------------------------------------
# The app
# --------------------------------------------------------------------------------------------------
def create_app(rec: Reconciler, config: Config, token: str | None = None, started_at: float = 0.0) -> FastAPI:
    ctl = DaemonControl(rec, config, started_at)  # the only way into the daemon from here
    creds: list[AgentCredentials] = []  # loaded on first use (makes <state_dir>/agent.key once)

    def credentials() -> AgentCredentials:
        if not creds:
            os.makedirs(config.daemon.state_dir, exist_ok=True)
            creds.append(AgentCredentials.load(config.daemon.state_dir))
        return creds[0]

    access = Access(config.api, token, agent_node=lambda t: credentials().live_node(ctl.lease)(t),
                    job_caller=lambda c: verify_munge(c, socket=config.api.munge_socket))
    app = FastAPI(title="burstd control API", version="1", description=__doc__)
    app.state.access = access
    read, admin, hook = access.need("read"), access.need("admin"), access.need("hooks")
    agent = access.need_principal("agent")

    def nodes_of(hostlist: str) -> list[str]:
        try:
            nodes = list(dict.fromkeys(expand(hostlist, validate=True)))  # each node once
        except HostlistError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            ctl.check_nodes(nodes)
        except UnknownNode as exc:
            raise HTTPException(404, str(exc)) from None
        return nodes

    def hook_call(kind: str, body: HookCall) -> dict:
        # The hook gives up after its timeout: the database may keep us only half of it, so the answer (done, or
        # 503 with nothing recorded) always reaches the hook; never a lease committed after it left.
        wait = 0.5 * min(body.timeout_s or config.daemon.hook_timeout_s, config.daemon.hook_timeout_s)
        if body.deadline is not None:  # a request that reached us late (slow to send, queued) gets what is left
            left = body.deadline - time.time()
            if left < MIN_HOOK_LEFT_S:
                ctl.metrics.hook_calls.labels(kind, "late").inc()
                raise HTTPException(503, f"{kind} {body.hostlist}: the hook's deadline passed before burstd got "
                                         "to its call: nothing was recorded")
            wait = min(wait, 0.5 * left)
        try:
            with lock_wait(wait):
                return _hook_call(kind, body, wait)
        except StoreBusy as exc:
            ctl.metrics.hook_calls.labels(kind, "busy").inc()
            raise HTTPException(503, f"{kind} {body.hostlist}: {exc}") from None

    def _hook_call(kind: str, body: HookCall, wait: float) -> dict:
        try:
            nodes = nodes_of(body.hostlist)
        except HTTPException:
            ctl.metrics.hook_calls.labels(kind, "rejected").inc()
            raise
        if kind == "resume":
            jobs: dict[str, list[int]] = {}
            for j in body.jobs:
                try:
                    for n in dict.fromkeys(expand(j.nodes, validate=True)) if j.nodes else []:
                        jobs.setdefault(n, []).append(j.job_id)
                except HostlistError as exc:
                    ctl.metrics.hook_calls.labels(kind, "rejected").inc()
                    raise HTTPException(422, f"SLURM_RESUME_FILE job {j.job_id}: {exc}") from None
            info = {j.job_id: ResumeJob.of(j.job_id, j.priority, j.exclusive) for j in body.jobs}
            out = ctl.request_resume(nodes, {n: tuple(v) for n, v in jobs.items()}, hook_t0=body.t0, info=info,
                                     wait_s=wait)
        else:
            ctl.queue(kind, nodes, f"{'SuspendProgram' if kind == 'suspend' else 'ResumeFailProgram'}")
            out = {"queued": nodes}
        ctl.metrics.hook_calls.labels(kind, "ok").inc()
        log.info(f"hook {kind}", extra=ev(hostlist=body.hostlist, nodes=len(nodes),
                                          job_id=body.jobs[0].job_id if body.jobs else None))
        return out

    @app.get("/healthz", tags=["public"])
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

    @app.post("/v1/notices", tags=["agent"], status_code=202)
    def notice(body: NoticeCall, who: Principal = agent) -> dict:
        """burstd-agent: a preemption notice for a node (drains its lease, wakes the loop). A node's agent
        token speaks for its own node only."""
        if who.role == "agent" and body.node != who.node:
            raise HTTPException(403, f"permission denied for {who.who}: it may report for {who.node} only")
        nodes = nodes_of(body.node)
        ctl.queue("notice", nodes, check_reason(notice_reason(body.kind, body.deadline, body.detail)))
        log.warning("preemption notice", extra=ev(node=body.node, kind=body.kind, deadline=body.deadline))
        return {"queued": nodes}

    @app.get("/v1/parity", tags=["agent"])
    def parity_settings(who: Principal = agent) -> dict:
        """burstd-agent's parity gate: the on-prem reference fingerprint, the allowed differences, the site's
        checks. 404: no reference is configured (the gate is open)."""
        try:
            settings = ctl.parity_settings()
        except NotReady as exc:
            raise HTTPException(503, str(exc)) from None
        if settings is None:
            raise HTTPException(404, "no parity.reference_file configured: the parity gate is open")
        return settings

    @app.get("/v1/preempt-rate/{node}", tags=["agent"])
    def preempt_rate(node: str = Path(max_length=64), who: Principal = agent) -> dict:
        """burstd-agent: the observed preemptions per node-hour of the pool ``node`` runs in (what its one-node
        jobs size their checkpoint interval from); ``rate_per_node_hour`` is null while the pool has too little
        history. A node's agent token asks for its own node only."""
        if who.role == "agent" and node != who.node:
            raise HTTPException(403, f"permission denied for {who.who}: it may ask for {who.node} only")
        rate = ctl.preempt_rate_for_node(node)
        if rate is None:
            raise HTTPException(404, f"node {node} has no open lease: no pool to tell the rate of")
        return rate.as_dict()

    @app.get("/v1/stage-in/{job_id}", tags=["agent"])
    def stage_in_manifest(job_id: int = Path(ge=1, le=4_294_967_294), who: Principal = agent) -> dict:
        """burstd-agent's prolog: job ``job_id``'s declared inputs as staged near its pool (``state``: queued,
        running, done or failed) and the pool's store. A node's agent token gets an answer only for a job its
        node holds (the node's open lease, or the last snapshot shows the job there); 404 otherwise."""
        answer = ctl.staging_for(job_id, who.node if who.role == "agent" else None)
        if answer is None:
            raise HTTPException(404, f"job {job_id}: no staged inputs for {who.who}")
        return answer

    @app.post("/v1/parity", tags=["agent"], status_code=202)
    def parity_refused(body: ParityCall, who: Principal = agent) -> dict:
        """burstd-agent: the node differs from the on-prem reference and slurmd was not started; its lease fails
        with the differences as its reason (a boot failure), its jobs go back to the queue."""
        if who.role == "agent" and body.node != who.node:
            raise HTTPException(403, f"permission denied for {who.who}: it may report for {who.node} only")
        nodes = nodes_of(body.node)
        try:
            why = check_reason(parity_reason(body.differences, MAX_REASON))
        except ValueError as exc:
            raise HTTPException(422, f"differences: {exc}") from None
        ctl.queue("parity", nodes, why)
        pool = ctl.config.pool_of_node(body.node)
        ctl.metrics.parity_refusals.labels(pool.name if pool else "unknown").inc()
        log.warning("parity gate refused a node", extra=ev(node=body.node, reason=why))
        return {"queued": nodes}

    @app.get("/v1/status", tags=["read"])
    def status(who: str = read) -> dict:
        return ctl.status()

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
        return [lease_dict(x) for x in ctl.leases(states)]

    @app.get("/v1/events", tags=["read"])
    def events(lease_id: str | None = Query(None, max_length=128), limit: int = Query(100, ge=1, le=10_000),
               who: str = read) -> list[dict]:
        return unit_named([dataclasses.asdict(e) for e in ctl.events(lease_id, limit)])

    @app.get("/v1/jobs", tags=["read"])
    def jobs(job: int | None = Query(None, ge=1, le=MAX_JOB_ID), account: str | None = Query(None, max_length=64),
             user: str | None = Query(None, max_length=64), state: str | None = Query(None, max_length=16),
             since: float | None = SINCE, who: str = read) -> list[dict]:
        """Burst jobs from burstd's records: where each ran, preemptions, requeues, cost (``burstctl jobs``)."""
        if state is not None and state not in JOB_STATES:
            raise HTTPException(422, f"state {state!r}: use one of {', '.join(JOB_STATES)}")
        return ctl.jobs(job=job, account=account, user=user, state=state, since=since)

    @app.get("/v1/explain/{job_id}", tags=["read"])
    def explain(job_id: str = Path(max_length=64), who: str = read) -> dict:
        """Why a job bursts or not, from the last cycle's snapshot and decisions (``1234``, ``1234_5``,
        ``1234_[1-3]``, ``1234+0``: as Slurm writes job ids)."""
        try:
            ref = parse_job_ref(job_id)
        except JobRefError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            return ctl.explain(ref)
        except NotReady as exc:
            raise HTTPException(503, str(exc)) from None

    @app.post("/v1/pause", tags=["admin"])
    def pause(body: ReasonBody | None = None, who: str = admin) -> dict:
        reason = body.reason if body else ""
        state = ctl.pause(reason, who)
        return {"paused": True, "reason": state.reason, "by": state.by, "since": state.since}

    @app.post("/v1/resume", tags=["admin"])
    def resume(who: str = admin) -> dict:
        state = ctl.resume(who)
        return {"paused": False, "by": state.by, "since": state.since}

    @app.post("/v1/pools/{pool}/unprotect", tags=["admin"])
    def unprotect(pool: str, who: str = admin) -> dict:
        if pool not in {p.name for p in config.pools}:
            raise HTTPException(404, f"no pool {pool!r} in this daemon's config")
        try:
            was = ctl.unprotect(pool, who)
        except LookupError as exc:
            raise HTTPException(409, str(exc)) from None
        return {"pool": pool, "protected": False, "was": was}

    @app.post("/v1/cloud/gc", tags=["admin"], status_code=202)
    def cloud_gc(body: GcBody, who: str = admin) -> dict:
        """Orphan VMs by the daemon's one rule (``providers.orphans``), as the last cycle saw them. Unless
        ``dry_run``, the sweep is queued: the leader's next cycle terminates them, each kill recorded under its
        fence first (the store's ``orphan_termination`` table), like its own sweeps."""
        if body.pool is not None and body.pool not in {p.name for p in config.pools}:
            raise HTTPException(404, f"no pool {body.pool!r} in this daemon's config")
        try:
            return ctl.gc(dry_run=body.dry_run, grace_s=body.grace_s, pool=body.pool, by=who)
        except NotReady as exc:
            raise HTTPException(503, str(exc)) from None

    @app.post("/v1/nodes/{node}/agent-token", tags=["admin"])
    def agent_token(node: str, who: str = admin) -> dict:
        """The credential for the agent on ``node``'s current VM: notices for that node only, until its lease
        ends. Hand it to the node's bootstrap (a secret the node reads once); never give a node the admin token."""
        [name] = nodes_of(node) if "[" not in node and "," not in node else [None]
        if name is None:
            raise HTTPException(422, "one node name, not a hostlist")
        lease = ctl.lease_for_node(name)
        if lease is None or lease.state not in OPEN_STATES:
            raise HTTPException(404, f"node {name} has no open lease: no agent credential to give")
        log.warning("agent token issued", extra=ev(node=name, lease_id=lease.lease_id, by=who))
        return {"node": name, "lease_id": lease.lease_id, "token": credentials().token_for(lease)}

    @app.post("/v1/nodes/{node}/drain", tags=["admin"], status_code=202)
    def drain(node: str, body: ReasonBody | None = None, who: str = admin) -> dict:
        nodes = nodes_of(node)
        ctl.queue("drain", nodes, check_reason(body.reason if body and body.reason else f"drained by {who}"))
        return {"queued": nodes}

    @app.post("/v1/nodes/{node}/terminate", tags=["admin"], status_code=202)
    def terminate(node: str, body: ReasonBody | None = None, who: str = admin) -> dict:
        nodes = nodes_of(node)
        ctl.queue("terminate", nodes,
                       check_reason(body.reason if body and body.reason else f"terminated by {who}"))
        return {"queued": nodes}

    @app.put("/v1/budgets/{account}", tags=["admin"])
    def set_budget(account: str, body: BudgetBody, who: str = admin) -> dict:
        """``account`` is a Slurm account, or ``(none)`` (``NO_ACCOUNT``): jobs submitted without one."""
        from burstd.slurm.base import SlurmError, check_name

        try:
            if account != NO_ACCOUNT:
                check_name("account", account)
        except ValueError as exc:
            raise HTTPException(422, f"{exc}; for jobs without an account use {NO_ACCOUNT!r} "
                                     "(burstctl budget set --no-account USD)") from None
        try:
            limit, warning = ctl.set_budget(account, body.usd)
        except ValueError as exc:  # BudgetError, or an account slurmdbd does not know: nothing was written
            raise HTTPException(422, str(exc)) from None
        except SlurmError as exc:  # slurmdbd configured but not answering: refuse rather than guess
            raise HTTPException(503, f"cannot ask Slurm's accounting about account {account!r}: {exc}") from None
        log.warning("budget set", extra=ev(account=account, usd=str(body.usd), by=who, warning=warning))
        out = {"account": account, "limit_micro_usd": limit}
        if warning:
            out["warning"] = warning
        return out

    @app.get("/v1/budgets", tags=["read"])
    def budgets(who: str = read) -> dict:
        """Limits and spend this period, in micro-dollars (``source``: ``set`` through the API, ``config``
        from ``[budget.accounts]``, ``default`` = ``budget.default_account_usd``, ``none`` = may not burst)."""
        return ctl.budgets()

    @app.get("/v1/spend", tags=["read"])
    def spend(by: str = "account", since: float | None = SINCE, until: float | None = UNTIL,
              who: str = read) -> dict:
        """Spend of intervals starting in [since, until), grouped, largest first (micro-dollars)."""
        if by not in ("account", "user", "job", "pool", "kind"):
            raise HTTPException(422, f"by must be account, user, job, pool or kind, not {by!r}")
        rows = ctl.spend(by, since, until)
        return {"by": by, "since": since, "until": until, "total_micro_usd": sum(rows.values()),
                "rows": [{"key": k, "spend_micro_usd": v} for k, v in rows.items()]}

    @app.get("/v1/spend/reconcile", tags=["read"])
    def spend_reconcile(since: float | None = None, who: str = read) -> dict:
        """burstd's spend per job against the jobs slurmdbd recorded on the cloud nodes; differences listed."""
        from burstd.daemon.sacct_check import NoAccounting
        from burstd.slurm.base import SlurmError

        try:
            return ctl.reconcile_spend(since)
        except NoAccounting as exc:
            raise HTTPException(409, str(exc)) from None
        except SlurmError as exc:
            raise HTTPException(503, f"sacct: {exc}") from None

    @app.get("/v1/spend/series", tags=["read"])
    def spend_series(by: str = "account", since: float | None = SINCE, until: float | None = UNTIL,
                     who: str = read) -> dict:
        """Spend by interval start and key, sorted by time: what ``burstctl spend --plot`` draws."""
        if by not in ("account", "user", "job", "pool", "kind"):
            raise HTTPException(422, f"by must be account, user, job, pool or kind, not {by!r}")
        series = ctl.spend_series(by, since, until)
        return {"by": by, "points": [{"t": t, "key": k, "spend_micro_usd": c} for t, k, c in series]}

    @app.get("/metrics", tags=["read"])
    def metrics(who: str = read) -> PlainTextResponse:
        return PlainTextResponse(ctl.metrics_text(), media_type="text/plain; version=0.0.4")

    api_progress.register(app, ctl, access)

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
