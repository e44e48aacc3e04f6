"""``burstctl jobs``: burst jobs from burstd's own records, with where they ran, preemptions, requeues and cost.

    burstctl jobs --account chem --since 7d
    burstctl jobs --state running --json

The daemon joins its leases, their allocations (which job held which cloud node, and when), the spend ledger
and the lease events (``GET /v1/jobs``, ``burstd.report.job_history``); ``burstctl explain JOB`` tells the same
story for a job that has left the queue.
"""

from __future__ import annotations

import time

import typer

from burstd.cli.common import ConfigOption, JsonFlag, WideFlag, api_call, console, fail, show
from burstd.cli.tables import Column, print_table
from burstd.cli.timespec import SINCE_HELP, parse_when
from burstd.domain.money import format_usd
from burstd.report.job_history import STATES


def _when(ts: float | None) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def _print_jobs(rows: list[dict], wide: bool) -> None:
    cols = [Column("job"), Column("account/user", drop=3), Column("state"), Column("nodes", free_text=True),
            Column("pool", drop=2), Column("started", drop=1), Column("ended", drop=0),
            Column("preempted", justify="right"), Column("requeued", justify="right", drop=4),
            Column("cost", justify="right")]
    print_table(console, "burst jobs", cols, [
        [str(r["job_id"]), f"{r['account'] or '-'}/{r['user'] or '-'}", r["state"], ",".join(r["nodes"]) or "-",
         ",".join(r["pools"]) or "-", _when(r["first_start"]), _when(r["last_end"]), str(r["preemptions"]),
         str(r["requeues"]), format_usd(r["cost_micro_usd"])] for r in rows], wide=wide)
    if not rows:
        console.print("no burst jobs in burstd's records for these filters", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("jobs")
    def jobs(
        account: str = typer.Option(None, "--account", help="Only this Slurm account's jobs."),
        user: str = typer.Option(None, "--user", help="Only this user's jobs."),
        state: str = typer.Option(None, "--state", help=f"{' or '.join(STATES)}"),
        since: str = typer.Option(None, "--since", help=SINCE_HELP + " Jobs running, or ended since then "
                                                                     "[default: the last 30 days]."),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
        wide: bool = WideFlag,
    ) -> None:
        """Burst jobs from burstd's records: where each ran, preemptions, requeues, cost (newest first)."""
        if state is not None and state not in STATES:
            fail(f"--state {state!r}: use one of {', '.join(STATES)}", 2)
        try:
            t_since = parse_when(since, "--since")
        except ValueError as exc:
            fail(str(exc), 2)
        show(lambda: api_call(config, lambda api: api.get("/v1/jobs", account=account, user=user, state=state,
                                                          since=t_since)),
             lambda rows: _print_jobs(rows, wide), as_json=as_json)
