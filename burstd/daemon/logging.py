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


def setup_logging(fmt: str = "json", level: int = logging.INFO, stream=None) -> None:
    """Configure the ``burstd`` logger tree once (idempotent)."""
    global _configured
    root = logging.getLogger("burstd")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    _configured = True


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"burstd.{name}")
