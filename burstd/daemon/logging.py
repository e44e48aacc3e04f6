"""Structured logs: one JSON object a line on stderr (journald keeps each line as one entry).

    log = get_logger("reconcile")
    log.info("lease launched", extra=ev(lease_id=lease.lease_id, node="cloud1", job_id=12))

Every line carries ``ts``, ``level``, ``logger``, ``event`` and the fields given in ``extra`` (the
lease id and job id on every line that concerns them). ``log_format = "text"`` prints the same
fields as ``key=value`` for people reading a terminal.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_FIELDS_KEY = "burstd_fields"
_configured = False


def ev(**fields: Any) -> dict[str, Any]:
    """The ``extra=`` argument that attaches fields to one log line (``None`` values are dropped)."""
    return {_FIELDS_KEY: {k: v for k, v in fields.items() if v is not None}}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The fields ``ev`` attached to a log record (empty when none)."""
    return dict(getattr(record, _FIELDS_KEY, {}))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        out.update(getattr(record, _FIELDS_KEY, {}))
        if record.exc_info:
            out["error_class"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, _FIELDS_KEY, {}).items())
        line = f"{stamp} {record.levelname.lower():7s} {record.name}: {record.getMessage()}" + (
            f"  {fields}" if fields else ""
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class RepeatLimit(logging.Filter):
    """At most ``burst`` lines of one kind (logger, level, message template) per ``window_s``; the next line of
    that kind after a quiet spell says how many were dropped (``suppressed_repeats``). A flood of failing
    connections once wrote 81 MB of identical tracebacks in 2.5 minutes; the journal keeps what matters."""

    def __init__(self, burst: int = 10, window_s: float = 60.0, kinds: int = 4096, clock=time.monotonic):
        super().__init__()
        self.burst, self.window_s, self.kinds, self.clock = burst, window_s, kinds, clock
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # kind -> [window start, count, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        state = self._seen.get(key)
        if state is None or now - state[0] >= self.window_s:
            dropped = int(state[2]) if state else 0
            if len(self._seen) >= self.kinds:  # bounded: forget the oldest kind
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = [now, 1, 0]
            if dropped:
                fields = dict(getattr(record, _FIELDS_KEY, {}))
                fields["suppressed_repeats"] = dropped
                setattr(record, _FIELDS_KEY, fields)
            return True
        state[1] += 1
        if state[1] <= self.burst:
            return True
        state[2] += 1
        return False


def setup_logging(fmt: str = "json", level: int = logging.INFO, stream=None) -> None:
    """Configure the ``burstd`` logger tree once (idempotent). asyncio's own logger (accept errors, lost
    connections) goes through the same handler and the same repeat limit."""
    global _configured
    root = logging.getLogger("burstd")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RepeatLimit())
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    aio = logging.getLogger("asyncio")
    aio.handlers[:] = [handler]
    aio.propagate = False
    _configured = True


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"burstd.{name}")
