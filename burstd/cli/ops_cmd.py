"""Operating burstd: ``burstctl status | leases | events | pause | resume | drain | terminate | slurm-conf |
budget | spend | explain``.

Everything except ``slurm-conf`` talks to the running daemon over its control API (the unix socket in
``api.socket``); reads are open to ``api.socket_group``, changes need ``api.admin_group``. Every read
takes ``--json``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from burstd.cli.common import ConfigOption, JsonFlag, console, err_console, fail, get_config, print_json
from burstd.config import Config
from burstd.slurm.conf import HOOK_DIR


def _api(cfg: Config):
    from burstd.daemon.client import ApiClient

    return ApiClient.from_config(cfg)


def _call(config: str | None, fn: Callable[[Any], Any]) -> Any:
    from burstd.daemon.client import ApiError

    cfg = get_config(config)
    try:
        with _api(cfg) as api:
            return fn(api)
    except ApiError as exc:
        fail(str(exc), 3 if exc.status is None else 1)


def _ago(ts: float | None) -> str:
    if not ts:
        return "-"
    s = time.time() - ts
    if s < 120:
        return f"{s:.0f}s ago"
    if s < 7200:
        return f"{s / 60:.0f}m ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def hook_script(kind: str, python: str, config_path: str) -> str:
    return (
        "#!/bin/sh\n"
        f"# burstd {kind} hook: Slurm passes the hostlist as $1; this returns at once.\n"
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"BURSTD_CONFIG='{config_path}'\n"
        "export PATH BURSTD_CONFIG\n"
        f"exec '{python}' -m burstd.daemon.hooks {kind} \"$@\"\n"
    )


def install_hooks(directory: str, python: str, config_path: str) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    written = []
    for kind in ("resume", "suspend", "resume-fail"):
        path = os.path.join(directory, kind)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(hook_script(kind, python, config_path))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        written.append(path)
    return written


# ------------------------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        """Queue pressure, leases by state, cloud nodes, and what the loop did last."""
        data = _call(config, lambda api: api.get("/v1/status"))
        if as_json:
            print_json(data)
            return
        q = data["queue"]
        pause = data.get("pause") or {}
        paused = "[bold red]PAUSED[/]" + (f" by {escape(pause['by'])}" if pause.get("by") else "") \
            + (f": {escape(pause['reason'])}" if pause.get("reason") else "")
        console.print(f"[bold]burstd[/] cluster [cyan]{data['cluster']}[/]  decider {data['decider']}  "
                      + (paused if data["paused"] else "[green]bursting on[/]"))
        console.print(f"queue: {q['pending_jobs']} pending ({q['burst_eligible_jobs']} burst-eligible), "
                      f"{q['running_jobs']} running; by partition: "
                      + (", ".join(f"{k}={v}" for k, v in q["pending_by_partition"].items()) or "-"))
        console.print("leases: " + (", ".join(f"{k}={v}" for k, v in sorted(data["leases_by_state"].items()))
                                    or "none open"))
        t = Table("node", "slurm state", "flags", "lease", title="cloud nodes")
        for n in data["nodes"]:
            t.add_row(n["name"], n["state"], ",".join(n["flags"]), n["lease_state"] or "-")
        console.print(t)
        for pool, h in (data.get("pool_health") or {}).items():
            if not isinstance(h, dict):
                continue
            if h.get("protected"):
                console.print(f"[bold red]pool {pool} PROTECTED[/] since {_ago(h.get('protected_since'))}: "
                              f"{h.get('protected_reason')} (burstctl cloud unprotect {pool})", highlight=False)
            if h.get("last_launch_failure"):
                console.print(f"[yellow]pool {pool}[/] {h['last_launch_failure']['text']}"
                              + ("" if h.get("launching") else " (not launching)"), highlight=False)
            for c in h.get("cooldowns") or []:
                console.print(f"  pool {pool}: offering {c['offering']} cooling down until "
                              f"{time.strftime('%H:%M:%S', time.localtime(c['until']))} ({c['reason']})", highlight=False)
        lc = data.get("last_cycle")
        if lc:
            acts = ", ".join(f"{k}={v}" for k, v in lc["actions"].items()) or "nothing to do"
            console.print(f"last cycle {_ago(lc['started_at'])} in {lc['duration_s'] * 1000:.0f} ms: {acts}"
                          + (f"; [red]{len(lc['errors'])} error(s)[/]: {lc['errors'][-1]}" if lc["errors"] else ""))

    @app.command("leases")
    def leases(
        state: str = typer.Option(None, "--state", help="comma-separated states, e.g. READY,BOOTING"),
        all_: bool = typer.Option(False, "--all", help="include TERMINATED and REFUSED"),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """Node leases (open ones by default)."""
        rows = _call(config, lambda api: api.get("/v1/leases", state=state, all=all_ or None))
        if as_json:
            print_json(rows)
            return
        t = Table("lease", "node", "pool", "state", "since", "instance", "jobs", "gang", "reason")
        for r in rows:
            t.add_row(r["lease_id"], r["node_name"], r["pool"], r["state"], _ago(r["state_since"]),
                      r.get("instance_id") or "-", ",".join(map(str, r["job_ids"])) or "-",
                      (r.get("gang") or "-")[:8], r.get("reason") or "")
        console.print(t)

    @app.command("events")
    def events(
        lease: str = typer.Option(None, "--lease", help="only this lease's events"),
        limit: int = typer.Option(50, "--limit"),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """The lease event log (every transition, with time and reason)."""
        rows = _call(config, lambda api: api.get("/v1/events", lease_id=lease, limit=limit))
        if as_json:
            print_json(rows)
            return
        t = Table("time", "lease", "from", "to", "reason")
        for r in rows:
            at = r.get("at") or r.get("created_at") or r.get("time")
            t.add_row(time.strftime("%m-%d %H:%M:%S", time.localtime(at)) if at else "-", str(r.get("lease_id", "")),
                      str(r.get("from_state") or r.get("from") or ""),
                      str(r.get("to_state") or r.get("state") or r.get("to") or ""), str(r.get("reason") or ""))
        console.print(t)

    @app.command("pause")
    def pause(reason: str = typer.Option("", "--reason"), config: str = ConfigOption) -> None:
        """Stop bursting: no new job becomes eligible, pending eligibility is revoked, launches refused."""
        _call(config, lambda api: api.post("/v1/pause", json={"reason": reason}))
        console.print("bursting [bold red]paused[/]")

    @app.command("resume")
    def resume(config: str = ConfigOption) -> None:
        """Resume bursting after ``pause``."""
        _call(config, lambda api: api.post("/v1/resume"))
        console.print("bursting [green]resumed[/]")

    @app.command("drain")
    def drain(node: str = typer.Argument(..., help="cloud node name"), reason: str = typer.Option("", "--reason"),
              config: str = ConfigOption) -> None:
        """Drain a cloud node: it finishes its jobs, takes no new ones, then powers down."""
        _call(config, lambda api: api.post(f"/v1/nodes/{node}/drain", json={"reason": reason}))
        console.print(f"{node}: drain requested")

    @app.command("terminate")
    def terminate(node: str = typer.Argument(..., help="cloud node name"), reason: str = typer.Option("", "--reason"),
                  config: str = ConfigOption) -> None:
        """Terminate a cloud node now (its jobs are requeued)."""
        _call(config, lambda api: api.post(f"/v1/nodes/{node}/terminate", json={"reason": reason}))
        console.print(f"{node}: termination requested")

    @app.command("explain")
    def explain(job_id: int = typer.Argument(...), config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        """Why a job bursts, or does not."""
        data = _call(config, lambda api: api.get(f"/v1/explain/{job_id}"))
        if as_json:
            print_json(data)
            return
        if data.get("sentence"):
            console.print(data["sentence"], highlight=False, soft_wrap=True)  # one line: greppable
            return
        verdict = "[green]bursts[/]" if data.get("burst") else "[yellow]stays on-prem[/]"
        console.print(f"job {job_id}: {verdict}" + (f" to {data['pool']}" if data.get("pool") else "")
                      + f": {data.get('reason', '')}")

    @app.command("spend")
    def spend(
        by: str = typer.Option("account", "--by", help="account | user | job | pool"),
        since: str = typer.Option(None, "--since", help="Unix time, or 1h / 7d / 30d ago"),
        plot: str = typer.Option(None, "--plot", help="also write spend over time per key to FILE (.png or .html)"),
        reconcile: bool = typer.Option(False, "--reconcile",
                                       help="compare the jobs burstd charged with those slurmdbd recorded on the "
                                            "cloud nodes (sacct); exit 1 on any difference"),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """Recorded cloud spend, grouped."""
        ts = _since(since)
        if reconcile:
            _spend_reconcile(config, ts, as_json)
            return
        if plot is not None and not plot.lower().endswith((".png", ".html", ".htm")):
            fail(f"--plot {plot!r}: use a .png or .html file name")
        data = _call(config, lambda api: api.get("/v1/spend", by=by, since=ts))
        if plot is not None:
            from burstd.report.spend_plot import render

            series = _call(config, lambda api: api.get("/v1/spend/series", by=by, since=ts))
            try:
                written = render([(t, k, c) for t, k, c in series], plot, title=f"burstd cloud spend by {by}")
            except OSError as exc:
                fail(f"--plot {plot!r}: {exc}")
            err_console.print(f"wrote {written}", highlight=False)
        if as_json:
            print_json(data)
            return
        from burstd.domain.money import format_usd

        rows = data.items() if isinstance(data, dict) else [(r.get(by, r.get("key")), r) for r in data]
        t = Table(by, "spend")
        for key, val in rows:
            amount = format_usd(val) if isinstance(val, int) else str(val)
            t.add_row(str(key) or "(overhead)", amount)
        console.print(t)

    budget_app = typer.Typer(help="Per-account budgets for the current period.", no_args_is_help=True)
    app.add_typer(budget_app, name="budget")

    @budget_app.command("show")
    def budget_show(config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        data = _call(config, lambda api: api.get("/v1/budgets"))
        if as_json:
            print_json(data)
            return
        t = Table("account", "limit", "spent")
        for acct, b in data.get("accounts", {}).items():
            t.add_row(acct, str(b.get("limit", "-")), str(b.get("spent", "-")))
        console.print(t)

    @budget_app.command("set", context_settings={"ignore_unknown_options": True})  # "-5" is an amount
    def budget_set(account: str = typer.Argument(...),
                   usd: str = typer.Argument(..., metavar="USD", help="limit for this period, e.g. 250 or 99.50"),
                   config: str = ConfigOption) -> None:
        """Set an account's budget (negative or non-numeric amounts are refused and change nothing)."""
        from decimal import Decimal, InvalidOperation

        try:
            amount = Decimal(usd)
        except InvalidOperation:
            fail(f"budget for account {account}: {usd!r} is not an amount in USD")
        if not amount.is_finite() or amount < 0:
            fail(f"budget for account {account} must be a finite amount >= 0, got {usd!r}; nothing changed")
        data = _call(config, lambda api: api.put(f"/v1/budgets/{account}", json={"usd": usd}))
        if isinstance(data, dict) and data.get("warning"):
            err_console.print(f"[bold yellow]warning:[/] {data['warning']}", highlight=False)
        console.print(f"budget of {account}: ${amount:,.2f} this period")

    @app.command("slurm-conf")
    def slurm_conf(
        config: str = ConfigOption,
        hook_dir: str = typer.Option(HOOK_DIR, "--hook-dir", help="where the hook scripts live"),
        suspend_time: int = typer.Option(300, "--suspend-time", help="idle seconds before a cloud node powers down"),
        install_hooks_: bool = typer.Option(False, "--install-hooks",
                                            help="also write the three hook scripts into --hook-dir"),
        slurm_release: str = typer.Option(None, "--slurm-release",
                                          help="the site's Slurm release, e.g. 24.11 (default: the live one, "
                                               "from `squeue --version` with [slurm] bin_dir/conf)"),
        accounting: bool = typer.Option(False, "--accounting",
                                        help="the site runs slurmdbd: add AccountingStorageTRES with GPUs"),
    ) -> None:
        """Print the slurm.conf lines for burstd's cloud pools (power saving, CLOUD nodes, partitions)."""
        from burstd.slurm.conf import slurm_conf_lines
        from burstd.slurm.features import parse_release

        cfg = get_config(config)
        if slurm_release is None:
            from burstd.slurm.base import SlurmError
            from burstd.slurm.cli import CliAdapter

            try:
                release = CliAdapter(cfg.slurm).version
            except SlurmError as exc:
                fail(f"cannot read the live Slurm release ({exc}); give --slurm-release, e.g. 24.11", 2)
        else:
            try:
                release = parse_release(slurm_release)
            except ValueError:
                fail(f"--slurm-release: expected MAJOR.MINOR such as 24.11, got {slurm_release!r}", 2)
        if install_hooks_:
            from burstd.config import config_path

            for path in install_hooks(hook_dir, sys.executable, str(config_path(config).resolve())):
                typer.echo(f"# wrote {path}", err=True)
        for line in slurm_conf_lines(cfg, release=release, hook_dir=hook_dir, suspend_time=suspend_time,
                                     accounting=accounting):
            typer.echo(line)


def _spend_reconcile(config: str | None, since: float | None, as_json: bool) -> None:
    from burstd.domain.money import format_usd

    data = _call(config, lambda api: api.get("/v1/spend/reconcile", since=since))
    if as_json:
        print_json(data)
    else:
        console.print(f"jobs that agree with sacct: {len(data['agree'])} ({format_usd(data['agreed_micros'])}); "
                      f"overhead (boot, idle): {format_usd(data['overhead_micros'])}", highlight=False)
        t = Table("job", "difference", "burstd", "sacct")
        for job, micros in data["only_burstd"].items():
            t.add_row(job, "charged, but sacct has it on no cloud node", format_usd(micros), "-")
        for job in data["only_sacct"]:
            t.add_row(str(job), "ran on a cloud node, burstd charged nothing", "-", "on a cloud node")
        for job, v in data["other_nodes"].items():
            t.add_row(job, "other cloud nodes", ",".join(v["burstd"]), ",".join(v["sacct"]))
        for job, v in data["other_account"].items():
            t.add_row(job, "other account", v["burstd"], v["sacct"])
        if data["ok"]:
            console.print("[green]burstd and slurmdbd agree[/] on which jobs ran on which cloud nodes")
        else:
            console.print(t)
    if not data["ok"]:
        raise typer.Exit(1)


def _since(value: str | None) -> float | None:
    if not value:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1] in units and value[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(value[:-1]) * units[value[-1]]
    try:
        return float(value)
    except ValueError:
        fail(f"--since {value!r}: give a Unix time or an age like 1h, 7d")
