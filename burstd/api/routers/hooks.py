"""Slurm's hooks (ResumeProgram, SuspendProgram, ResumeFailProgram) and the public health check.

A hook waits a bounded time for its answer: the database may keep a call only half of it, so the answer (done, or
503 with nothing recorded) always reaches the hook; never a lease committed after it left."""

from __future__ import annotations

import time

from fastapi import FastAPI, HTTPException

from burstd.api.context import RouteContext
from burstd.api.models import HookCall
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.planning import ResumeJob
from burstd.db.engine import lock_wait
from burstd.domain.hostlist import HostlistError, expand
from burstd.domain.store_errors import StoreBusy

log = get_logger("api")

MIN_HOOK_LEFT_S = 0.05  # less than this left before the hook's deadline: too late to record and answer


def register(app: FastAPI, ctx: RouteContext) -> None:
    ctl, intake, config, hook = ctx.ctl, ctx.intake, ctx.config, ctx.hook

    def hook_call(kind: str, body: HookCall) -> dict:
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
            nodes = ctx.nodes_of(body.hostlist)
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
            out = intake.request_resume(nodes, {n: tuple(v) for n, v in jobs.items()}, hook_t0=body.t0, info=info,
                                        wait_s=wait)
        else:
            intake.add_intent(kind, nodes, f"{'SuspendProgram' if kind == 'suspend' else 'ResumeFailProgram'}")
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
