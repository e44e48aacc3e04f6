"""``burstctl data progress FILE...``: where a job's staging stands (the records burstd.data writes; docs/data.md).

    burstctl data progress /run/burstd/staging/4242-in.json
    burstctl data progress /run/burstd/staging/*.json --json
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from burstd.cli.common import JsonFlag, WideFlag, console, fail, print_json, sub_app
from burstd.cli.tables import Column, print_table


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def register(app: typer.Typer) -> None:
    data = sub_app("A burst job's data: staging progress.")
    app.add_typer(data, name="data")

    @data.command("progress")
    def progress_cmd(
        files: list[Path] = typer.Argument(..., help="progress records (--progress of stage-in/stage-out/push)"),
        as_json: bool = JsonFlag,
        wide: bool = WideFlag,
    ) -> None:
        """Show each staging's state, bytes moved and reused, rate and time left."""
        from burstd.data.progress import read_progress

        try:
            records = [(f, read_progress(f)) for f in files]
        except (OSError, ValueError) as exc:
            fail(str(exc), 2)
        if as_json:
            print_json([{"file": str(f), **asdict(r)} for f, r in records])
            return
        rows = []
        for f, r in records:
            pct = f"{100 * r.bytes_done / r.bytes_total:.0f}%" if r.bytes_total else "-"
            left = (f"{(r.bytes_total - r.bytes_done) / r.rate_bytes_s:.0f} s"
                    if r.state == "running" and r.rate_bytes_s > 0 else "-")
            state = r.state if r.error is None else f"{r.state}: {r.error}"
            rows.append([f.name, r.direction, state, f"{r.files_done}/{r.files_total}",
                         f"{_size(r.bytes_done)} of {_size(r.bytes_total)} ({pct})", _size(r.bytes_reused),
                         f"{_size(r.rate_bytes_s)}/s", left])
        columns = [Column("file", free_text=True), Column("way", drop=2), Column("state", free_text=True),
                   Column("files", drop=1), Column("done"), Column("reused", drop=3), Column("rate", drop=4),
                   Column("left")]
        print_table(console, "staging", columns, rows, wide=wide)
