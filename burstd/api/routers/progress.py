"""The routes of training progress: a job's report on itself, and the reports for readers.

``POST /v1/jobs/{job_id}/progress`` takes no body: the report is the payload of the job's MUNGE credential
(``Authorization: Munge <credential>``, see ``burstd.daemon.job_credentials``), checked by the gate before any
body is read. Only that role reaches it, and it reaches nothing else (``burstd.api.auth``: role "job").
``GET /v1/progress`` lists the latest report of every job that sent one, for readers.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Path, Request

from burstd.api.auth import JOB_CALLER_KEY
from burstd.api.context import RouteContext
from burstd.daemon.control import NotReady
from burstd.daemon.job_credentials import JobCaller
from burstd.daemon.job_progress import ReportRefused
from burstd.daemon.logging import ev, get_logger
from burstd.domain.jobref import MAX_JOB_ID

log = get_logger("api")


def register(app: FastAPI, ctx: RouteContext) -> None:
    ctl, job_role, read = ctx.ctl, ctx.job, ctx.read

    @app.post("/v1/jobs/{job_id}/progress", tags=["job"], status_code=202)
    def report_progress(request: Request, job_id: int = Path(ge=1, le=MAX_JOB_ID), who: str = job_role) -> dict:
        """A training job's steps, step time and GPU use, sealed in its own MUNGE credential (``burstd.train``)."""
        caller = request.scope.get(JOB_CALLER_KEY)
        if not isinstance(caller, JobCaller):  # the gate let only a MUNGE caller through: never expected
            raise HTTPException(403, "this call needs the job's own MUNGE credential")
        outcomes = ctl.metrics.training_reports
        try:
            progress = ctl.record_progress(caller, job_id, caller.payload)
        except ValueError as exc:
            outcomes.labels("invalid").inc()
            raise HTTPException(422, str(exc)) from None
        except ReportRefused as exc:
            outcomes.labels("refused").inc()
            log.warning("progress report refused", extra=ev(job_id=job_id, who=who, reason=str(exc)))
            raise HTTPException(403, f"permission denied for {who}: {exc}") from None
        except NotReady as exc:
            raise HTTPException(503, str(exc)) from None
        outcomes.labels("ok").inc()
        return progress

    @app.get("/v1/progress", tags=["read"])
    def progress(who: str = read) -> list[dict]:
        """The latest training report of every job that sent one (newest first): on-prem and cloud."""
        return ctl.progress()
