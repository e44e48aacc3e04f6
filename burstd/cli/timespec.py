"""The one way ``burstctl`` reads a point in time (``--since``, ``--until``): every command says it the same way.

    parse_when("2026-11-01")            # a date: midnight UTC
    parse_when("2026-11-01T08:30+01:00")  # a date-time; UTC unless it names a zone
    parse_when("7d")                    # an age: 7 days before now (s, m, h, d, w)
    parse_when("1793232000")            # a Unix time
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

#: The help text of every ``--since`` (one wording everywhere).
SINCE_HELP = "From this time: a date (UTC) like 2026-11-01, a date-time, an age like 12h or 7d, or a Unix time."
UNTIL_HELP = "Up to this time (same forms as --since) [default: now]."

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(value: str | None, what: str = "--since", now: float | None = None) -> float | None:
    """Unix seconds for ``value`` (None or "" stays None). Raises ``ValueError`` naming ``what`` and the forms."""
    if value is None or value.strip() == "":
        return None
    v = value.strip()
    if v[-1:] in _UNITS and v[:-1].replace(".", "", 1).isdigit():
        return (time.time() if now is None else now) - float(v[:-1]) * _UNITS[v[-1]]
    try:
        return float(v)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise ValueError(f"{what} {value!r}: give a date like 2026-11-01, a date-time like 2026-11-01T08:30, "
                         "an age like 90m, 12h, 7d or 4w, or a Unix time") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
