"""Spend over time per account (or user, job, pool) against each account's budget: a PNG, or a self-contained
HTML page. What ``burstctl spend --plot FILE`` writes.

    series = store.spend_series(by="account", since=t0, until=t1)     # [(start, key, micros), ...]
    render(series, "spend.png", budgets={"chem": 5_000_000_000})      # or "spend.html": chart + totals table

Each account's budget is a dashed line in its curve's colour, so "how close is chem to its cap" is one look.
The time axis is labelled by matplotlib's concise date formatter, which picks seconds, hours, days or months
to suit the span (a 2-minute bed run and a quarter both read well).

Uses matplotlib's Agg canvas directly (no pyplot, no display, no global backend switch). Money stays in
integer micro-dollars until it is drawn; the totals table is exact.
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from burstd.domain.money import format_usd

Series = Iterable[tuple[float, str, int]]


def cumulative(series: Series) -> dict[str, tuple[list[float], list[int]]]:
    """Per key: the times and the running total (micro-dollars) after each point, sorted by time.
    Keys are ordered by their total, largest first."""
    points: dict[str, dict[float, int]] = {}
    for t, key, micros in series:
        per = points.setdefault(str(key), {})
        per[float(t)] = per.get(float(t), 0) + int(micros)
    out: dict[str, tuple[list[float], list[int]]] = {}
    for key, per in points.items():
        ts = sorted(per)
        running, acc = [], 0
        for t in ts:
            acc += per[t]
            running.append(acc)
        out[key] = (ts, running)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1][1][-1], kv[0])))


def totals(series: Series) -> dict[str, int]:
    return {k: v[1][-1] for k, v in cumulative(series).items()}


def _figure(curves: dict[str, tuple[list[float], list[int]]], title: str, max_lines: int,
            budgets: dict[str, int] | None = None, since: float | None = None, until: float | None = None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    shown = list(curves.items())
    if len(shown) > max_lines:  # fold the long tail into one line so the chart stays readable
        head, tail = shown[: max_lines - 1], shown[max_lines - 1 :]
        merged: dict[float, int] = {}
        for _, (ts, run) in tail:
            prev = 0
            for t, r in zip(ts, run, strict=True):
                merged[t] = merged.get(t, 0) + r - prev
                prev = r
        mts = sorted(merged)
        acc, mrun = 0, []
        for t in mts:
            acc += merged[t]
            mrun.append(acc)
        shown = head + [(f"{len(tail)} others", (mts, mrun))]
    budgets = budgets or {}
    top = max((run[-1] for _, run in curves.values()), default=0)
    # a total holds until the end of the period shown, but never past now (no flat line into the future)
    end = min(until, time.time()) if until is not None else None
    for key, (ts, run) in shown:
        xs = [float(date2num(datetime.fromtimestamp(t, UTC))) for t in ts]  # the date axis counts days
        ys = [r / 1e6 for r in run]
        if end is not None and end > ts[-1]:  # the total holds to the end of the period shown
            xs.append(float(date2num(datetime.fromtimestamp(end, UTC))))
            ys.append(ys[-1])
        (line,) = ax.step(xs, ys, where="post", label=f"{key} ({format_usd(run[-1])})")
        if key in budgets:
            label = f"{key} budget ({format_usd(budgets[key])})"
            if budgets[key] <= 10 * top:
                ax.axhline(budgets[key] / 1e6, color=line.get_color(), linestyle="--", linewidth=1, label=label)
            else:  # a far-off cap would flatten every curve into the x axis: name it, do not draw it
                ax.plot([], [], color=line.get_color(), linestyle="--", linewidth=1, label=label + ", above the chart")
    if not shown:  # nothing to scale to: the period asked for, else the last day (never matplotlib's 1970)
        since, until = _empty_window(since, until, time.time())
    if since is not None or until is not None:
        left = float(date2num(datetime.fromtimestamp(since, UTC))) if since is not None else None
        right = float(date2num(datetime.fromtimestamp(until, UTC))) if until is not None else None
        if left is None or right is None or right > left:
            ax.set_xlim(left=left, right=right)
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_ylim(bottom=0, top=None if shown else 1)
    ax.set_ylabel("cumulative spend (USD)")
    ax.set_xlabel("time (UTC)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if shown:
        ax.legend(loc="upper left", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no spend in this period", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def _empty_window(since: float | None, until: float | None, now: float) -> tuple[float, float]:
    """The x range of a chart with no spend: ``since`` to ``until`` where given, else up to now, a day long."""
    right = until if until is not None else max(now, since or now)
    left = since if since is not None else right - 86400
    if right <= left:
        right = left + 86400
    return left, right


def png_bytes(series: Series, title: str = "burstd cloud spend", max_lines: int = 12, **window) -> bytes:
    """``window``: ``budgets`` (key -> micro-dollars), ``since``, ``until`` (Unix seconds; the x range)."""
    fig = _figure(cumulative(series), title, max_lines, **window)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def html_page(series: Series, title: str = "burstd cloud spend", max_lines: int = 12, **window) -> str:
    """One HTML file with everything inline (no script, no external fetch): the chart and a totals table."""
    data = list(series)
    img = base64.b64encode(png_bytes(data, title, max_lines, **window)).decode()
    tot = totals(data)
    rows = "\n".join(
        f"<tr><td>{html.escape(k)}</td><td style='text-align:right'>{html.escape(format_usd(v))}</td></tr>"
        for k, v in tot.items()
    )
    all_ = format_usd(sum(tot.values()))
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 10px}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        f"<img alt='cumulative spend over time' src='data:image/png;base64,{img}'>\n"
        "<table><tr><th>key</th><th>spend</th></tr>\n"
        f"{rows}\n<tr><th>total</th><th style='text-align:right'>{html.escape(all_)}</th></tr></table>\n"
        "</body></html>\n"
    )


def render(series: Series, path: str | Path, title: str = "burstd cloud spend", max_lines: int = 12,
           *, budgets: dict[str, int] | None = None, since: float | None = None, until: float | None = None) -> Path:
    """Write the chart to ``path``: ``.png`` or ``.html``/``.htm`` (chosen by the suffix)."""
    window = {"budgets": budgets, "since": since, "until": until}
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".png":
        p.write_bytes(png_bytes(series, title, max_lines, **window))
    elif suffix in (".html", ".htm"):
        p.write_text(html_page(series, title, max_lines, **window), encoding="utf-8")
    else:
        raise ValueError(f"cannot write a spend plot to {p.name!r}: use a .png or .html file name")
    return p
