"""Free text in burstctl's tables and lines: what users and Slurm wrote (an account string, a job name, a node
reason, a user) shown so that it cannot draw on the terminal or pass for other rows.

    table.add_row(cell(job["account"]))            # a rich Text: never read as markup
    console.print(f"account {escape(shown(a))}")   # inside a line that has markup of its own

``shown`` keeps printable characters and escapes every other one as ``repr`` does (``\\n``, ``\\x1b``, ``\\u202e``;
a backslash doubles, so an escape cannot be faked): no raw newline (a forged row), no ANSI escape (colours,
cursor moves, a retitled terminal), no bidi override. ``--json`` output carries the text unchanged.
"""

from __future__ import annotations

from rich.text import Text


def shown(text: object) -> str:
    s = "" if text is None else str(text)
    if s.isprintable() and "\\" not in s:
        return s
    return "".join(ch if ch.isprintable() and ch != "\\" else repr(ch)[1:-1] for ch in s)


def cell(text: object) -> Text:
    """A table cell of free text: escaped, and plain (rich would read ``[red]`` in a str cell as markup)."""
    return Text(shown(text))
