"""The progress record of one staging: a small JSON file, replaced whole, that the daemon and ``burstctl`` read.

    {"version": 1, "direction": "in", "dataset": "<manifest sha256>", "state": "running",
     "files_total": 12, "files_done": 3, "bytes_total": 1073741824, "bytes_done": 268435456,
     "bytes_reused": 0, "rate_bytes_s": 19731002.5, "started_at": 1795000000.0, "updated_at": 1795000013.6,
     "error": null}

``state`` is running, done or failed; ``bytes_reused`` counts bytes already in place (a cache hit or a resumed
transfer) that did not cross the link. The file is written at most every ``interval_s`` and at every state
change, to a temporary name then renamed, so a reader never sees half a record.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Progress:
    direction: str  # "in" (towards the node) or "out" (back on-prem)
    dataset: str = ""
    state: str = "running"
    files_total: int = 0
    files_done: int = 0
    bytes_total: int = 0
    bytes_done: int = 0
    bytes_reused: int = 0
    rate_bytes_s: float = 0.0
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    error: str | None = None
    version: int = 1


class ProgressFile:
    """Holds a Progress and writes it to ``path`` (or nowhere, when path is None)."""

    def __init__(self, path: Path | None, direction: str, interval_s: float = 0.5,
                 clock: Callable[[], float] = time.time, on_write: Callable[[Progress], None] | None = None):
        self.path = path
        self.on_write = on_write  # told each written record (the daemon keeps bytes sent so far in its database)
        self.interval_s = interval_s
        self._clock = clock
        self.record = Progress(direction=direction, started_at=clock(), updated_at=clock())
        self._written_at = float("-inf")
        self._lock = threading.RLock()  # files move side by side: their callbacks come from several threads

    def moved(self, n: int) -> None:
        """n bytes crossed the link."""
        with self._lock:
            self.record.bytes_done += n
            self._maybe_write()

    def reused(self, n: int) -> None:
        """n bytes were already in place (cache hit, resumed part)."""
        with self._lock:
            self.record.bytes_done += n
            self.record.bytes_reused += n
            self._maybe_write()

    def file_done(self) -> None:
        with self._lock:
            self.record.files_done += 1
            self._maybe_write()

    def finish(self, error: str | None = None) -> None:
        with self._lock:
            self.record.state = "failed" if error else "done"
            self.record.error = error
            self.write()

    def _maybe_write(self) -> None:
        if self._clock() - self._written_at >= self.interval_s:
            self.write()

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        now = self._clock()
        r = self.record
        r.updated_at = now
        elapsed = now - r.started_at
        r.rate_bytes_s = (r.bytes_done - r.bytes_reused) / elapsed if elapsed > 0 else 0.0
        self._written_at = now
        if self.on_write is not None:
            self.on_write(r)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(asdict(r), f, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def read_progress(path: Path) -> Progress:
    """The record at path; ValueError naming the file when it is not one."""
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise ValueError("not a version 1 progress record")
        return Progress(**doc)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a staging progress record ({exc})") from None
