"""Retry a cloud call on throttling and transient errors, with capped exponential backoff and full jitter.

Capacity, quota and config errors are never retried here: capacity goes to the cooldown cache and the next
offering, quota and config go to the admin.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from burstd.providers.base import ErrorKind, ProviderError

log = logging.getLogger("burstd.providers")
T = TypeVar("T")

RETRYABLE = frozenset({ErrorKind.THROTTLED, ErrorKind.TRANSIENT})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    base_s: float = 0.5
    max_s: float = 20.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**attempt)]."""
        cap = min(self.max_s, self.base_s * (2**attempt))
        return (rng or random).uniform(0, cap)


def call_with_retry(
    fn: Callable[[], T],
    classify: Callable[[Exception], ProviderError],
    policy: RetryPolicy,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn``; map failures through ``classify``; retry the retryable ones; raise a ProviderError."""
    for attempt in range(policy.attempts):
        try:
            return fn()
        except ProviderError as exc:
            err = exc
        except Exception as exc:  # noqa: BLE001 - classified just below, re-raised as ProviderError
            err = classify(exc)
            err.__cause__ = exc
        if err.kind not in RETRYABLE or attempt == policy.attempts - 1:
            raise err
        pause = policy.delay(attempt)
        log.warning("%s: %s; retry %d/%d in %.2fs", what, err, attempt + 1, policy.attempts - 1, pause)
        sleep(pause)
    raise AssertionError("unreachable")
