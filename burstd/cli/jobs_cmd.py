"""``burstctl jobs``: burst jobs from burstd's own records joined with Slurm's accounting (sacct), with where they
ran, their outcome, preemptions, requeues and cost (compute and data).

    burstctl jobs --account chem --since 7d
    burstctl jobs --state running --json
    burstctl jobs --training          # steps, step time, GPU use and cost per step of jobs that report them
    burstctl jobs --watch 10          # again every 10 s until Ctrl-C (also with --training, --json)

The daemon joins its leases, their allocations (which job held which cloud node, and when), the spend ledger
and the lease events (``burstd.report.job_history``) with every run sacct recorded (``burstd.report.job_accounting``,
``GET /v1/jobs``); ``burstctl explain JOB`` tells the same story for a job that has left the queue.
"""

from __future__ import annotations

import time

import typer

from burstd.cli.common import ConfigOption, JsonFlag, WatchOption, WideFlag, api_call, console, fail, show
from burstd.cli.tables import Column, print_table
from burstd.cli.timespec import SINCE_HELP, parse_when
from burstd.domain.money import format_usd
from burstd.report.job_history import STATES


def _when(ts: float | None) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def small_usd(micros: float | None) -> str:
    """A price per step: far below a cent, so in significant digits (``$0.000124``), not cents."""
    if micros is None:
        return "-"
    return f"${micros / 1e6:.3g}" if micros < 10_000 else format_usd(round(micros))


def progress_sentence(p: dict, now: float | None = None) -> str:
    """``training: step 1,200, 0.72 s/step, GPU 70%, $0.0001/step ($0.1/epoch), reported 12 s ago``."""
    parts = [f"step {p['step']:,}", f"{p['step_time_s']:.3g} s/step"]
    if p.get("gpu_util") is not None:
        parts.append(f"GPU {p['gpu_util']:.0f}%")
    if p.get("cost_per_step_micro_usd") is not None:
        cost = f"{small_usd(p['cost_per_step_micro_usd'])}/step"
        if p.get("cost_per_epoch_micro_usd") is not None:
            cost += f" ({small_usd(p['cost_per_epoch_micro_usd'])}/epoch)"
        parts.append(cost)
    else:
        parts.append("on-prem")
    ago = max(0.0, (time.time() if now is None else now) - p["reported_at"])
    return "training: " + ", ".join(parts) + f", reported {ago:.0f} s ago"


def _progress_cells(r: dict) -> list[str]:
    p = r.get("progress")
    if not p:
        return ["-", "-", "-"]
    return [f"{p['step']:,}", f"{p['step_time_s']:.3g}", small_usd(p.get("cost_per_step_micro_usd"))]


def outcome(r: dict) -> str:
    """``running`` while burstd sees it on a node, else Slurm's state of its last run (``COMPLETED``,
    ``FAILED``...), or ``ended`` where Slurm's accounting could not say."""
    return r["state"] if r["state"] == "running" else r.get("outcome") or r["state"]


def _print_jobs(rows: list[dict], wide: bool) -> None:
    cols = [Column("job"), Column("account/user", drop=3), Column("outcome"), Column("nodes", free_text=True),
            Column("pool", drop=2), Column("started", drop=1), Column("ended", drop=0),
            Column("preempted", justify="right"), Column("requeued", justify="right", drop=4),
            Column("cost", justify="right"), Column("step", justify="right", drop=-1),
            Column("s/step", justify="right", drop=-2), Column("$/step", justify="right", drop=-3)]
    print_table(console, "burst jobs", cols, [
        [r.get("slurm_id") or str(r["job_id"]), f"{r['account'] or '-'}/{r['user'] or '-'}", outcome(r),
         ",".join(r["nodes"]) or "-", ",".join(r["pools"]) or "-", _when(r["first_start"]), _when(r["last_end"]),
         str(r["preemptions"]), str(r["requeues"]), format_usd(r["cost_micro_usd"]), *_progress_cells(r)]
        for r in rows], wide=wide)
    if not rows:
        console.print("no burst jobs in burstd's records for these filters", highlight=False)
    notes = {(r.get("slurm") or {}).get("note") or "" for r in rows if not (r.get("slurm") or {}).get("source")}
    if len(notes) == 1 and "" not in notes:  # the same for every job: no accounting to read
        console.print(f"Slurm's accounting: {notes.pop()}", highlight=False)  # wrapped to the width


def _print_training(rows: list[dict], wide: bool) -> None:
    cols = [Column("job"), Column("account/user", drop=2), Column("side"), Column("nodes", free_text=True),
            Column("step", justify="right"), Column("s/step", justify="right"),
            Column("GPU", justify="right", drop=3), Column("$/step", justify="right"),
            Column("$/epoch", justify="right", drop=1), Column("reported", drop=0)]
    print_table(console, "training progress", cols, [
        [str(p["job_id"]), f"{p['account'] or '-'}/{p['user'] or '-'}", p["side"], p["nodes"] or "-",
         f"{p['step']:,}", f"{p['step_time_s']:.3g}",
         "-" if p.get("gpu_util") is None else f"{p['gpu_util']:.0f}%", small_usd(p.get("cost_per_step_micro_usd")),
         small_usd(p.get("cost_per_epoch_micro_usd")), _when(p["reported_at"])] for p in rows], wide=wide)
    if not rows:
        console.print("no job has reported training progress (burstd.train reports where BURSTD_PROGRESS_URL is "
                      "set: docs/researchers.md)", highlight=False)


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
        training: bool = typer.Option(False, "--training", help="Training progress instead: the last report of "
                                      "every job that sends one, on-prem and cloud (steps, step time, GPU, cost "
                                      "per step)."),
        watch: float = WatchOption,
    ) -> None:
        """Burst jobs from burstd's records joined with Slurm's accounting: where each ran, its outcome,
        preemptions, requeues, cost (newest first)."""
        if training:
            show(lambda: api_call(config, lambda api: api.get("/v1/progress")),
                 lambda rows: _print_training(rows, wide), as_json=as_json, watch=watch)
            return
        if state is not None and state not in STATES:
            fail(f"--state {state!r}: use one of {', '.join(STATES)}", 2)
        try:
            t_since = parse_when(since, "--since")
        except ValueError as exc:
            fail(str(exc), 2)
        show(lambda: api_call(config, lambda api: api.get("/v1/jobs", account=account, user=user, state=state,
                                                          since=t_since)),
             lambda rows: _print_jobs(rows, wide), as_json=as_json, watch=watch)
