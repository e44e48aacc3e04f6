"""burstd-agent's routes: preemption notices, the parity gate (its settings, a refusal) and the pool's preemption
rate. A node's agent token speaks for its own node only; hooks and admins may speak for any."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Path

from burstd.api.auth import Principal
from burstd.api.context import RouteContext
from burstd.api.models import NoticeCall, ParityCall
from burstd.daemon.control import NotReady
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.planning import notice_reason
from burstd.domain.parity import reason_of as parity_reason
from burstd.slurm.base import MAX_REASON, check_reason

log = get_logger("api")


def register(app: FastAPI, ctx: RouteContext) -> None:
    ctl, intake, agent = ctx.ctl, ctx.intake, ctx.agent

    @app.post("/v1/notices", tags=["agent"], status_code=202)
    def notice(body: NoticeCall, who: Principal = agent) -> dict:
        """burstd-agent: a preemption notice for a node (drains its lease, wakes the loop). A node's agent
        token speaks for its own node only."""
        if who.role == "agent" and body.node != who.node:
            raise HTTPException(403, f"permission denied for {who.who}: it may report for {who.node} only")
        nodes = ctx.nodes_of(body.node)
        intake.add_intent("notice", nodes, check_reason(notice_reason(body.kind, body.deadline, body.detail)))
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
        nodes = ctx.nodes_of(body.node)
        try:
            why = check_reason(parity_reason(body.differences, MAX_REASON))
        except ValueError as exc:
            raise HTTPException(422, f"differences: {exc}") from None
        intake.add_intent("parity", nodes, why)
        pool = ctl.config.pool_of_node(body.node)
        ctl.metrics.parity_refusals.labels(pool.name if pool else "unknown").inc()
        log.warning("parity gate refused a node", extra=ev(node=body.node, reason=why))
        return {"queued": nodes}
