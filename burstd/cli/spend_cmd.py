"""``burstctl spend-plot``: chart recorded cloud spend over time, per account (or user, job, pool).

    burstctl spend-plot spend.html --since 30d             # self-contained page: chart + totals table
    burstctl spend-plot spend.png --by pool --since 2026-03-01 --until 2026-04-01

Reads the spend ledger straight from the database in ``[database] url`` (no daemon needed), so it works
for whoever may read that database (root, or the burstd user, on the head node).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import typer

from burstd.cli.common import ConfigOption, JsonFlag, fail, get_config, print_json

GROUPS = ("account", "user", "job", "pool")


def parse_when(value: str | None, what: str, now: float | None = None) -> float | None:
    """``None``, a Unix time, an ISO date/time (UTC unless it says otherwise), or an age: 90m, 12h, 7d."""
    if value is None or value == "":
        return None
    now = time.time() if now is None else now
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    v = value.strip()
    if v[-1:] in units and v[:-1].replace(".", "", 1).isdigit():
        return now - float(v[:-1]) * units[v[-1]]
    try:
        return float(v)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise ValueError(f"{what} {value!r}: give a Unix time, a date like 2026-03-01, or an age like 12h, 7d") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def register(app: typer.Typer) -> None:
    @app.command("spend-plot")
    def spend_plot(
        out: str = typer.Argument(..., help="file to write: .png, or .html (self-contained)"),
        by: str = typer.Option("account", "--by", help="account | user | job | pool"),
        since: str = typer.Option(None, "--since", help="Unix time, date (UTC), or age: 12h, 7d, 4w"),
        until: str = typer.Option(None, "--until", help="same forms as --since; default now"),
        title: str = typer.Option("burstd cloud spend", "--title"),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """Chart cumulative cloud spend over time from the spend ledger (PNG or self-contained HTML)."""
        if by not in GROUPS:
            fail(f"--by {by!r}: use one of {', '.join(GROUPS)}")
        if not out.lower().endswith((".png", ".html", ".htm")):
            fail(f"{out!r}: the file name must end in .png or .html")
        try:
            t_since = parse_when(since, "--since")
            t_until = parse_when(until, "--until")
        except ValueError as exc:
            fail(str(exc))
        cfg = get_config(config)
        from burstd.db.store import Store, StoreError
        from burstd.report.spend_plot import render, totals

        from sqlalchemy.engine import make_url

        u = make_url(cfg.database.url)
        if u.get_backend_name() == "sqlite" and u.database and not Path(u.database).exists():
            fail(f"no burstd database at {u.database} (has burstd run yet? is [database] url right?)")
        try:
            store = Store.open(cfg.database.url, migrate_to_head=False)
            series = store.spend_series(by=by, since=t_since, until=t_until)
            store.close()
        except (StoreError, OSError) as exc:
            fail(f"cannot read the spend ledger at {cfg.database.url}: {exc}")
        except Exception as exc:  # sqlalchemy errors: missing file, no permission, not migrated
            fail(f"cannot read the spend ledger at {cfg.database.url}: {type(exc).__name__}: {exc}".splitlines()[0])
        try:
            path = render(series, out, title=title)
        except OSError as exc:
            fail(f"cannot write {out}: {exc.strerror}")
        tot = totals(series)
        if as_json:
            print_json({"path": str(path), "by": by, "since": t_since, "until": t_until, "totals_micros": tot,
                        "total_micros": sum(tot.values())})
            return
        from burstd.domain.money import format_usd

        typer.echo(f"wrote {path}: {len(tot)} {by}(s), {format_usd(sum(tot.values()))} in all")
