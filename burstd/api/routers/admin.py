"""The admins' routes (``api.admin_group``, root, the daemon's user, the admin token): pause and resume, pool
protection, the orphan sweep, agent tokens, drain and terminate, budgets. Node commands are queued for the
leader's next cycle; each call names who made it."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException

from burstd.api.context import RouteContext
from burstd.api.models import BudgetBody, GcBody, ReasonBody
from burstd.daemon.control import NotReady
from burstd.daemon.logging import ev, get_logger
from burstd.domain.budget import NO_ACCOUNT
from burstd.domain.lease import OPEN_STATES
from burstd.slurm.base import check_reason

log = get_logger("api")


def register(app: FastAPI, ctx: RouteContext) -> None:
    ctl, intake, config, admin = ctx.ctl, ctx.intake, ctx.config, ctx.admin

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
        [name] = ctx.nodes_of(node) if "[" not in node and "," not in node else [None]
        if name is None:
            raise HTTPException(422, "one node name, not a hostlist")
        lease = ctl.lease_for_node(name)
        if lease is None or lease.state not in OPEN_STATES:
            raise HTTPException(404, f"node {name} has no open lease: no agent credential to give")
        log.warning("agent token issued", extra=ev(node=name, lease_id=lease.lease_id, by=who))
        return {"node": name, "lease_id": lease.lease_id, "token": ctx.credentials().token_for(lease)}

    @app.post("/v1/nodes/{node}/drain", tags=["admin"], status_code=202)
    def drain(node: str, body: ReasonBody | None = None, who: str = admin) -> dict:
        nodes = ctx.nodes_of(node)
        intake.add_intent("drain", nodes, check_reason(body.reason if body and body.reason else f"drained by {who}"))
        return {"queued": nodes}

    @app.post("/v1/nodes/{node}/terminate", tags=["admin"], status_code=202)
    def terminate(node: str, body: ReasonBody | None = None, who: str = admin) -> dict:
        nodes = ctx.nodes_of(node)
        intake.add_intent("terminate", nodes,
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
