"""A failed step of the reconcile cycle: the world's fault, or a bug in burstd.

    except Exception as exc:  # noqa: BLE001 - the cycle goes on
        step_failed(log, "spend accrual failed", exc, metrics, lease_id=lease.lease_id)

The cycle survives both kinds (the step is logged, counted in ``burstd_errors_total`` and tried again next
cycle), but they are not the same: a cloud, Slurm or database failure (``EXPECTED``) is the weather, while
anything else (a ``TypeError``, an ``AttributeError`` from a store that lacks a method) is a bug. A bug is logged
with its traceback and the field ``unexpected=true``; the daemon's unit tests fail any test during which a cycle
step logged one (the autouse fixture in ``tests/unit/daemon/conftest.py``), so a broad ``except`` can no longer
hide a broken seam behind a passing test.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import OperationalError

from burstd.daemon.logging import ev
from burstd.domain.store_errors import StoreError
from burstd.domain.lease import IllegalTransition
from burstd.policy.budget import PriceError
from burstd.providers.base import ProviderError
from burstd.slurm.base import SlurmError

if TYPE_CHECKING:
    from burstd.daemon.metrics import Metrics

#: Failures of the world the daemon runs in: a cloud API, Slurm, the database (busy, down, moved under us), the
#: network, a price the provider could not give. Everything else that escapes a step is a bug.
EXPECTED: tuple[type[BaseException], ...] = (
    ProviderError, SlurmError, StoreError, IllegalTransition, PriceError, OperationalError, OSError,
)

#: The log field the unit tests' fixture looks for.
UNEXPECTED_FIELD = "unexpected"


def is_expected(exc: BaseException) -> bool:
    return isinstance(exc, EXPECTED)


def step_failed(log: logging.Logger, what: str, exc: BaseException, metrics: Metrics | None = None,
                **fields: Any) -> None:
    """Log (and count, given ``metrics``) a cycle step that failed with ``exc``; the caller carries on."""
    if metrics is not None:
        metrics.error(exc)
    unexpected = not is_expected(exc)
    log.error(what, exc_info=exc if unexpected else None,
              extra=ev(**fields, error=str(exc), error_class=type(exc).__name__,
                       **({UNEXPECTED_FIELD: True} if unexpected else {})))
