"""Tables that fit the terminal (80 columns included) and say what they leave out; ``--wide`` shows everything.

    cols = [Column("lease"), Column("node"), Column("instance", drop=1), Column("reason", free_text=True)]
    print_table(console, "leases", cols, rows, wide=wide)

At the terminal's width a table keeps every column that has no ``drop`` rank, drops the others lowest rank first
until it fits, and shortens free-text columns with an ellipsis (one line a row, never strips of folded text);
a line under it names what was dropped or shortened and that ``--wide`` shows all. Ids are never shortened with
an ellipsis: a command that shows ids shows unique prefixes (``short_ids``), which every command takes.
``--wide`` prints every column whole, however long the lines (as ``ps ww`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from burstd.cli.freetext import shown
from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

FREE_TEXT_MIN = 20  # a free-text column keeps at least this much before a droppable column goes
SHORT_ID = 8  # like git's short hashes: enough to be unique among the rows shown, mostly


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    drop: int | None = None  # None: always shown; else dropped at narrow widths, lowest rank first
    free_text: bool = False  # shortened with an ellipsis rather than dropped
    justify: Literal["left", "right"] = "left"


def _border(n: int) -> int:
    return 3 * n + 1  # rich's default box: "│ " before each cell, " " after, one closing "│"


def _widths(col: Column, cells: list[str]) -> tuple[int, int]:
    """(narrowest, natural) width: a header wraps at its spaces, a cell never wraps."""
    cell = max((len(c) for c in cells), default=0)
    return max([cell, 1] + [len(w) for w in col.header.split()]), max(cell, len(col.header))


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> tuple[dict[int, int], list[str]]:
    """The columns kept and the width of each ({index: width}), and the free-text columns shortened, for a
    terminal ``width`` wide."""
    narrow, natural = zip(*(_widths(c, [r[i] for r in rows]) for i, c in enumerate(columns)), strict=True) \
        if columns else ((), ())
    least = [min(natural[i], FREE_TEXT_MIN) if c.free_text else narrow[i] for i, c in enumerate(columns)]
    keep = list(range(len(columns)))
    for i in sorted((i for i, c in enumerate(columns) if c.drop is not None), key=lambda i: columns[i].drop or 0):
        if sum(least[k] for k in keep) + _border(len(keep)) <= width:
            break
        keep.remove(i)
    w = {i: least[i] for i in keep}
    room = width - _border(len(keep)) - sum(w.values())
    # room left: free text first (it is what gets cut), then headers unwrapped
    for group in ([i for i in keep if columns[i].free_text], [i for i in keep if not columns[i].free_text]):
        while room > 0 and any(w[i] < natural[i] for i in group):
            for i in group:
                if room > 0 and w[i] < natural[i]:
                    w[i] += 1
                    room -= 1
    return w, [columns[i].header for i in keep if columns[i].free_text and w[i] < natural[i]]


def print_table(console: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                wide: bool, note: str = "") -> None:
    """``rows`` of strings under ``columns``, fitted to ``console.width`` unless ``wide``; ``note``: what else the
    reader should know (e.g. that ids are unique prefixes). Every cell is shown escaped (``freetext.shown``): a
    reason or an account string cannot draw on the terminal or pass for another row."""
    rows = [[shown(c) for c in r] for r in rows]
    if wide:
        widths = {i: _widths(c, [r[i] for r in rows])[1] for i, c in enumerate(columns)}
        shortened: list[str] = []
    else:
        widths, shortened = fit(columns, rows, console.width)
    t = Table(title=Text(title))  # plain text, as the cells: a path with [brackets] is not markup
    for i, w in widths.items():
        c = columns[i]
        # a cell fits its width; a free-text cell is cut with an ellipsis, one line a row
        t.add_column(c.header, justify=c.justify, width=w, no_wrap=c.free_text, overflow="ellipsis")
    for r in rows:
        t.add_row(*(Text(r[i]) for i in widths))  # plain text: "[red]" in a reason is not rich markup
    if wide:  # every column whole, however long the lines
        need = sum(widths.values()) + _border(len(widths))
        for line in console.render_lines(t, console.options.update_width(max(console.width, need)), pad=False):
            console.print(Segments([*line, Segment.line()]), soft_wrap=True, crop=False, end="")  # no wrap, no crop
    else:
        console.print(t)
    cut = [f"{', '.join(c.header for i, c in enumerate(columns) if i not in widths)} not shown"] \
        if len(widths) < len(columns) else []
    cut += [f"{', '.join(shortened)} shortened"] if shortened else []
    parts = ([note] if note else []) + ([f"{'; '.join(cut)} (--wide shows all)"] if cut else [])
    if parts:
        console.print("; ".join(parts), style="dim", highlight=False)


def short_ids(ids: Sequence[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix, at least ``minimum`` long, that no other id in ``ids`` starts with."""
    out = {}
    for i in ids:
        n = min(minimum, len(i))
        while n < len(i) and any(o != i and o.startswith(i[:n]) for o in ids):
            n += 1
        out[i] = i[:n]
    return out
