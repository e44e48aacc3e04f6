"""The readers' routes (``api.socket_group`` and above): status, leases, events, jobs, explain, budgets, spend,
metrics. Nothing here changes the daemon's state. JSON money says its unit (``*_micro_usd``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import FastAPI, HTTPException, Path, Query
from fastapi.responses import PlainTextResponse

from burstd.api.auth import Principal
from burstd.api.context import RouteContext
from burstd.api.models import SINCE, UNTIL
from burstd.daemon.control import NotReady
from burstd.domain.hostlist import NAME_RE
from burstd.domain.jobref import MAX_JOB_ID, JobRefError, parse_job_ref
from burstd.domain.lease import OPEN_STATES, Lease, LeaseState
from burstd.report.job_history import STATES as JOB_STATES


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


SPEND_GROUPINGS = ("account", "user", "job", "pool", "kind")


def check_spend_grouping(by: str) -> None:
    """``/v1/spend`` and ``/v1/spend/series`` group by the same keys (the ledger also knows ``lease``: not
    offered to readers)."""
    if by not in SPEND_GROUPINGS:
        raise HTTPException(422, f"by must be account, user, job, pool or kind, not {by!r}")


def register(app: FastAPI, ctx: RouteContext) -> None:
    ctl, read = ctx.ctl, ctx.read

    @app.get("/v1/status", tags=["read"])
    def status(who: str = read) -> dict:
        return ctl.status()

    @app.get("/v1/leases", tags=["node_read"])
    def leases(state: str | None = None, all: bool = False,
               node: str | None = Query(None, pattern=NAME_RE.pattern, description="this node's leases only"),
               who: Principal = ctx.node_read) -> list[dict]:
        """Readers see every lease; a node's agent only its own lease, open or not (its dead-man switch: is my
        lease open?). A token whose lease is over reads that much and nothing else."""
        agent = who.role in ("agent", "ended_agent")
        if agent and (node != who.node or who.lease is None):
            raise HTTPException(403, f"permission denied for {who.who}: an agent reads its own node's lease only "
                                     f"(node={who.node})")
        if state:
            try:
                states = {LeaseState(s.strip().upper()) for s in state.split(",")}
            except ValueError:
                raise HTTPException(422, f"unknown lease state in {state!r}; "
                                         f"known: {', '.join(s.value for s in LeaseState)}") from None
        else:
            states = set(LeaseState) if all else set(OPEN_STATES)
        return [lease_dict(x) for x in ctl.leases(states, node=node)
                if not agent or x.lease_id == who.lease]

    @app.get("/v1/events", tags=["read"])
    def events(lease_id: str | None = Query(None, max_length=128), limit: int = Query(100, ge=1, le=10_000),
               who: str = read) -> list[dict]:
        return unit_named([dataclasses.asdict(e) for e in ctl.events(lease_id, limit)])

    @app.get("/v1/jobs", tags=["read"])
    def jobs(job: int | None = Query(None, ge=1, le=MAX_JOB_ID), account: str | None = Query(None, max_length=64),
             user: str | None = Query(None, max_length=64), state: str | None = Query(None, max_length=16),
             since: float | None = SINCE, who: str = read) -> list[dict]:
        """Burst jobs from burstd's records joined with Slurm's accounting (sacct): where each ran, its outcome and
        every run, preemptions, requeues, cost by kind (``burstctl jobs``)."""
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

    @app.get("/v1/budgets", tags=["read"])
    def budgets(who: str = read) -> dict:
        """Limits and spend this period, in micro-dollars (``source``: ``set`` through the API, ``config``
        from ``[budget.accounts]``, ``default`` = ``budget.default_account_usd``, ``none`` = may not burst)."""
        return ctl.budgets()

    @app.get("/v1/spend", tags=["read"])
    def spend(by: str = "account", since: float | None = SINCE, until: float | None = UNTIL,
              who: str = read) -> dict:
        """Spend of intervals starting in [since, until), grouped, largest first (micro-dollars)."""
        check_spend_grouping(by)
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
        check_spend_grouping(by)
        series = ctl.spend_series(by, since, until)
        return {"by": by, "points": [{"t": t, "key": k, "spend_micro_usd": c} for t, k, c in series]}

    @app.get("/metrics", tags=["read"])
    def metrics(who: str = read) -> PlainTextResponse:
        return PlainTextResponse(ctl.metrics_text(), media_type="text/plain; version=0.0.4")
