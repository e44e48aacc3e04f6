"""The checkpoint interval a job gets from its environment: the pool's preemption rate, as the node's TaskProlog
exports it (``burstd.agent.preempt_rate``), read here; the Young/Daly arithmetic is pure and lives in
``burstd.domain.checkpoint_interval`` (the daemon's ``explain`` uses it too)."""

from __future__ import annotations

import math
import os

from burstd.domain.checkpoint_interval import (  # noqa: F401  (what jobs import from burstd.train)
    Interval, choose_interval, daly_interval_s, young_interval_s,
)

RATE_ENV = "BURSTD_PREEMPT_RATE_PER_HOUR"


def rate_from_env(env: dict[str, str] | None = None) -> float | None:
    """``BURSTD_PREEMPT_RATE_PER_HOUR`` as a float, None when unset; a clear ValueError when malformed."""
    raw = (os.environ if env is None else env).get(RATE_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        rate = float(raw)
    except ValueError:
        raise ValueError(f"{RATE_ENV} must be a number of preemptions per node-hour, got {raw!r}") from None
    if not (math.isfinite(rate) and rate >= 0):
        raise ValueError(f"{RATE_ENV} must be a finite rate >= 0 per node-hour, got {raw!r}")
    return rate
