#!/usr/bin/env python3
"""Rebuild every figure in docs/ from the current code, or check that the committed ones are fresh.

    python scripts/docs_figures.py            # rebuild docs/*.png and their numbers in docs/figures.json
    python scripts/docs_figures.py --check    # exit 1 naming each stale figure (what CI runs)

A figure is fresh when (1) the numbers it draws, computed again by today's code, equal the ones recorded in
docs/figures.json, and (2) the committed PNG is what today's drawing code makes of them (matplotlib's image
comparison, within a small RMS tolerance, so another freetype's anti-aliasing does not count as stale). Every input
is in the repository (the SDSC-BLUE sample in examples/traces, a fixed example spend series), so the check runs
anywhere the test suite does. To add a figure: one ``Figure`` below, and the image in the doc that shows it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RECORD = DOCS / "figures.json"
TOLERANCE_RMS = 2.0  # matplotlib.testing.compare: 0 is identical; text moved by a pixel is about 5-10

if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Figure:
    png: str  # under docs/
    shown_in: str  # the doc that shows it
    numbers: Callable[[], dict[str, Any]]  # what it draws, from the current code (JSON-able, deterministic)
    draw: Callable[[dict[str, Any], Path], None]


# ------------------------------------------------------------------------- simulate-frontier.png (docs/policy.md)
FRONTIER_TRACE = "examples/traces/SDSC-BLUE-2000-4.2-cln.first2000.swf.gz"


def frontier_numbers() -> dict[str, Any]:
    from burstd.simulate.report import simulate_trace

    report = simulate_trace(REPO / FRONTIER_TRACE, workers=1)
    return {"trace": FRONTIER_TRACE, "jobs_read": report["jobs_read"], "frontier": report["frontier"],
            "policies": {name: {"cloud_cost_usd": round(row["cloud_cost_usd"], 2),
                                "jct_mean_s": round(row["jct_mean_s"], 1)}
                         for name, row in report["policies"].items()}}


def frontier_draw(numbers: dict[str, Any], path: Path) -> None:
    from burstd.simulate.report import plot_frontier

    plot_frontier(numbers, path, title=f"cost vs mean JCT: SDSC-BLUE, first {numbers['jobs_read']:,} jobs "
                                       "(examples/traces)")


# ------------------------------------------------------------------------------- spend-plot.png (docs/budgets.md)
SPEND_START = 1_793_491_200.0  # 2026-11-01 00:00 UTC: a fixed month, so the figure does not change with the date
SPEND_ACCOUNTS = {"chem": (1_000_000, 220_000_000), "physics": (650_000, 150_000_000), "bio": (220_000, 40_000_000)}


def spend_numbers() -> dict[str, Any]:
    """An example month: each account's spend per 6 hours (weekdays busier), and its budget, in micro-dollars."""
    points = []
    for step in range(4 * 30):
        t = SPEND_START + step * 6 * 3600
        weekday = (step // 4 + 6) % 7 < 5  # 2026-11-01 is a Sunday
        for i, (account, (per_slot, _budget)) in enumerate(SPEND_ACCOUNTS.items()):
            if (step + i) % 3 == 0 or weekday:
                points.append([t, account, per_slot * (2 if weekday else 1) * (1 + (step * (i + 3)) % 5) // 3])
    return {"since": SPEND_START, "until": SPEND_START + 30 * 86400, "series": points,
            "budgets": {a: b for a, (_p, b) in SPEND_ACCOUNTS.items()}}


def spend_draw(numbers: dict[str, Any], path: Path) -> None:
    from burstd.report.spend_plot import render

    render([(t, k, int(c)) for t, k, c in numbers["series"]], path, title="cloud spend per account (an example month)",
           budgets=numbers["budgets"], since=numbers["since"], until=numbers["until"])


FIGURES = (
    Figure("simulate-frontier.png", "docs/policy.md", frontier_numbers, frontier_draw),
    Figure("spend-plot.png", "docs/budgets.md", spend_numbers, spend_draw),
)


def _png_matches(expected: Path, actual: Path) -> str | None:
    """None when the two images agree within the tolerance, else why not."""
    from matplotlib.testing.compare import compare_images

    if not expected.is_file():
        return f"{expected.relative_to(REPO)} is missing"
    try:
        diff = compare_images(str(expected), str(actual), tol=TOLERANCE_RMS, in_decorator=True)
    except Exception as exc:  # noqa: BLE001 - e.g. sizes differ: stale, said as such
        return f"the image differs ({exc})"
    return None if diff is None else f"the image differs (RMS {diff['rms']:.1f} > {TOLERANCE_RMS})"


def stale(figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """Why each stale figure is stale (empty: all fresh)."""
    recorded = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for fig in figures:
            numbers = json.loads(json.dumps(fig.numbers()))  # as the record holds them (tuples as lists)
            if recorded.get(fig.png) != numbers:
                problems.append(f"docs/{fig.png}: today's code draws other numbers than docs/figures.json records")
                continue
            fresh = Path(tmp) / fig.png
            fig.draw(numbers, fresh)
            why = _png_matches(DOCS / fig.png, fresh)
            if why:
                problems.append(f"docs/{fig.png}: {why}")
    return problems


def rebuild(figures: tuple[Figure, ...] = FIGURES) -> None:
    recorded = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    for fig in figures:
        numbers = json.loads(json.dumps(fig.numbers()))
        fig.draw(numbers, DOCS / fig.png)
        recorded[fig.png] = numbers
        print(f"docs/{fig.png} (shown in {fig.shown_in})")
    RECORD.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="say which figures are stale; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("rebuild them: python scripts/docs_figures.py", file=sys.stderr)
            return 1
        print(f"{len(FIGURES)} figures fresh")
        return 0
    rebuild()
    return 0


if __name__ == "__main__":
    sys.exit(main())
