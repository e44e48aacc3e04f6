"""Money: ``burstctl spend`` (recorded cloud spend, grouped; ``--plot`` draws it against the budgets) and
``burstctl budget show | set``.

    burstctl spend --by account --since 2026-11-01
    burstctl spend --since 7d --plot spend.png          # cumulative spend per account against its budget
    burstctl budget set chem 5000
    burstctl budget set --no-account 200                # jobs submitted without a Slurm account

All of it goes through the daemon's control API (reads for ``api.socket_group``, ``budget set`` for
``api.admin_group``). Amounts follow the one money rule of ``burstd.domain.money``: JSON carries integer
micro-dollars in fields named ``*_micro_usd``; tables show dollars rounded half-up to the cent.
"""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from burstd.cli.common import ConfigOption, JsonFlag, api_call, console, err_console, fail, print_json, sub_app
from burstd.cli.freetext import cell, shown
from burstd.cli.timespec import SINCE_HELP, UNTIL_HELP, parse_when
from burstd.domain.budget import NO_ACCOUNT
from burstd.domain.money import format_usd

GROUPS = ("account", "user", "job", "pool", "kind")  # kind: compute, transfer_in, transfer_out, storage
PLOT_SUFFIXES = (".png", ".html", ".htm")
SOURCES = {"set": "budget set", "config": "[budget.accounts]", "default": "default_account_usd", "none": "no budget"}


def _window(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    try:
        t_since, t_until = parse_when(since, "--since"), parse_when(until, "--until")
    except ValueError as exc:
        fail(str(exc), 2)
    if t_since is not None and t_until is not None and t_until <= t_since:
        fail(f"--until ({until}) must be later than --since ({since})", 2)
    return t_since, t_until


def _spend_reconcile(config: str | None, since: float | None, as_json: bool) -> None:
    """``spend --reconcile``: the daemon compares its ledger with sacct (GET /v1/spend/reconcile)."""
    data = api_call(config, lambda api: api.get("/v1/spend/reconcile", since=since))
    if as_json:
        print_json(data)
    else:
        console.print(f"jobs that agree with sacct: {len(data['agree'])} ({format_usd(data['agreed_micro_usd'])}); "
                      f"overhead (boot, idle): {format_usd(data['overhead_micro_usd'])}", highlight=False)
        # every value from sacct is shown escaped: an account string may hold newlines or terminal escapes
        t = Table("job", "difference", "burstd", "sacct")
        for job, v in data["only_burstd"].items():
            t.add_row(cell(job), "charged, but sacct has it on no cloud node", format_usd(v["spend_micro_usd"]), "-")
        for job in data["only_sacct"]:
            t.add_row(cell(job), "ran on a cloud node, burstd charged nothing", "-", "on a cloud node")
        for job, v in data["other_nodes"].items():
            t.add_row(cell(job), "other cloud nodes", cell(",".join(v["burstd"])), cell(",".join(v["sacct"])))
        for job, v in data["other_account"].items():
            t.add_row(cell(job), "other account", cell(v["burstd"]), cell(v["sacct"]))
        inst = data.get("instances")
        if inst:  # Slurm 23.11+ with slurmdbd: the VMs joined on their instance id
            console.print(f"instances Slurm recorded for burstd's VMs: {len(inst['agree'])} agree"
                          + (f"; [red]unknown to Slurm: {_line(', '.join(inst['only_burstd']))}[/]"
                             if inst["only_burstd"] else "")
                          + "".join(f"; [red]{_line(i)} on {_line(v['slurm'])} in Slurm, {_line(v['burstd'])} in "
                                    f"burstd[/]" for i, v in inst["other_node"].items())
                          + (f"; in Slurm without a lease here: {_line(', '.join(inst['only_slurm']))}"
                             if inst["only_slurm"] else ""), highlight=False, soft_wrap=True)
        if data["ok"]:
            console.print("[green]burstd and slurmdbd agree[/] on which jobs ran on which cloud nodes")
        else:
            console.print(t)
    if not data["ok"]:
        raise typer.Exit(1)


def _account_label(account: str) -> str:
    return account if account else NO_ACCOUNT


def _line(text: object) -> str:
    """Free text inside a line with markup of its own (instance ids and nodes as Slurm recorded them)."""
    return escape(shown(text))


def register(app: typer.Typer) -> None:
    @app.command("spend")
    def spend(
        by: str = typer.Option("account", "--by", help="Group by account, user, job, pool or kind (compute, "
                                                        "transfer_in, transfer_out, storage)."),
        since: str = typer.Option(None, "--since", help=SINCE_HELP + " [default: the first record]"),
        until: str = typer.Option(None, "--until", help=UNTIL_HELP),
        plot: str = typer.Option(None, "--plot", metavar="FILE",
                                 help="Also draw cumulative spend over time to FILE (.png, or a self-contained "
                                      ".html); by account, each account's budget for the period is drawn too."),
        reconcile: bool = typer.Option(False, "--reconcile",
                                       help="Compare the jobs burstd charged with those slurmdbd recorded on the "
                                            "cloud nodes (sacct); exit 1 on any difference."),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """Recorded cloud spend, grouped (overhead: boot and idle time, charged to no job)."""
        if reconcile:
            _spend_reconcile(config, _window(since, None)[0], as_json)
            return
        if by not in GROUPS:
            fail(f"--by {by!r}: use one of {', '.join(GROUPS)}", 2)
        if plot is not None and not plot.lower().endswith(PLOT_SUFFIXES):
            fail(f"--plot {plot!r}: the file name must end in .png or .html", 2)
        t_since, t_until = _window(since, until)
        data = api_call(config, lambda api: api.get("/v1/spend", by=by, since=t_since, until=t_until))
        if plot is not None:
            _plot(config, plot, by, t_since, t_until)
        if as_json:
            print_json(data)
            return
        t = Table(by, "spend", title=f"cloud spend by {by}")
        for row in data["rows"]:
            t.add_row(cell(row["key"]), format_usd(row["spend_micro_usd"]))
        t.add_section()
        t.add_row("total", format_usd(data["total_micro_usd"]))
        console.print(t)

    def _plot(config: str | None, out: str, by: str, t_since: float | None, t_until: float | None) -> None:
        from burstd.report.spend_plot import render

        series = api_call(config, lambda api: api.get("/v1/spend/series", by=by, since=t_since, until=t_until))
        budgets: dict[str, int] = {}
        if by == "account":
            book = api_call(config, lambda api: api.get("/v1/budgets"))
            budgets = {a: b["limit_micro_usd"] for a, b in book["accounts"].items()
                       if b.get("limit_micro_usd") is not None}
        points = [(p["t"], p["key"], p["spend_micro_usd"]) for p in series["points"]]
        try:
            written = render(points, out, title=f"burstd cloud spend by {by}", budgets=budgets,
                             since=t_since, until=t_until)
        except OSError as exc:
            fail(f"--plot {out!r}: cannot write it: {exc.strerror or exc}")
        err_console.print(f"wrote {written}", highlight=False)

    budget_app = sub_app("Per-account budgets for the current period (month, week or day: budget.period).")
    app.add_typer(budget_app, name="budget")

    @budget_app.command("show")
    def budget_show(config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        """Each account's limit and spend this period; the site cap and the default for accounts without one."""
        data = api_call(config, lambda api: api.get("/v1/budgets"))
        if as_json:
            print_json(data)
            return
        t = Table("account", "limit", "spent", "left", "limit from", title=f"budgets this {data['period']}")
        for acct, b in data["accounts"].items():
            lim, spent = b["limit_micro_usd"], b["spent_micro_usd"]
            t.add_row(cell(_account_label(acct)), "-" if lim is None else format_usd(lim), format_usd(spent),
                      "-" if lim is None else format_usd(lim - spent), SOURCES.get(b["source"], b["source"]))
        console.print(t)
        site, dflt = data.get("site") or {}, data.get("default_account_micro_usd")
        site_lim = site.get("limit_micro_usd")
        console.print(f"site: limit {'-' if site_lim is None else format_usd(site_lim)},"
                      f" spent {format_usd(site.get('spent_micro_usd', 0))}; accounts without a limit: "
                      + ("may not burst (budget.default_account_usd is not set)" if dflt is None
                         else f"{format_usd(dflt)} each (budget.default_account_usd)"), highlight=False)

    @budget_app.command("set", context_settings={"ignore_unknown_options": True})  # "-5" is an amount
    def budget_set(
        account: str = typer.Argument(None, help="Slurm account (omit with --no-account)"),
        usd: str = typer.Argument(None, metavar="USD", help="limit for this period, e.g. 250 or 99.50"),
        no_account: bool = typer.Option(False, "--no-account",
                                        help=f"Set the budget of jobs submitted without a Slurm account "
                                             f"(shown as {NO_ACCOUNT}); then give USD alone."),
        config: str = ConfigOption,
    ) -> None:
        """Set an account's budget (negative or non-numeric amounts are refused and change nothing)."""
        from decimal import Decimal, InvalidOperation

        if no_account:
            if usd is not None:
                fail("--no-account takes the amount alone: burstctl budget set --no-account USD", 2)
            account, usd = NO_ACCOUNT, account
        if account is None or usd is None:
            fail("give ACCOUNT and USD (or --no-account USD), e.g. burstctl budget set chem 250", 2)
        who = "jobs without an account" if account == NO_ACCOUNT else f"account {account}"
        try:
            amount = Decimal(usd)
        except InvalidOperation:
            fail(f"budget for {who}: {usd!r} is not an amount in USD", 2)
        if not amount.is_finite() or amount < 0:
            fail(f"budget for {who} must be a finite amount >= 0, got {usd!r}; nothing changed", 2)
        data = api_call(config, lambda api: api.put(f"/v1/budgets/{account}", json={"usd": usd}))
        if isinstance(data, dict) and data.get("warning"):
            err_console.print(f"[bold yellow]warning:[/] {data['warning']}", highlight=False)
        console.print(f"budget of {who}: {format_usd(data['limit_micro_usd'])} this period",
                      highlight=False)
