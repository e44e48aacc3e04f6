"""What slurmdbd vouches for, as the launch guard asks it (issue 21 item 2): a budget is charged only for a user
slurmdbd associates with the job's account, and never for an account slurmdbd does not know (so
``budget.default_account_usd`` cannot mint a budget for every string a user types after ``-A``).

``sacctmgr show assoc`` is one slurmdbd round trip: read at most every ``ttl_s``, and again at once when a pair is
missing from a copy older than ``recheck_s`` (an association an admin added a minute ago). If slurmdbd stops
answering, the last copy serves for ``stale_s``; after that launches are refused rather than charged blind.
A site without slurmdbd has nothing to ask (``None``): the daemon says so loudly at start (``accounting_warnings``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from burstd.daemon.logging import ev, get_logger
from burstd.policy.eligibility import Associations, association_refusal
from burstd.slurm.base import SlurmAdapter

log = get_logger("associations")


class SlurmdbdAssociations:
    def __init__(self, adapter: SlurmAdapter, clock: Callable[[], float], *, ttl_s: float = 60.0,
                 recheck_s: float = 5.0, stale_s: float = 600.0):
        self.adapter, self.clock = adapter, clock
        self.ttl_s, self.recheck_s, self.stale_s = ttl_s, recheck_s, stale_s
        self._lock = threading.Lock()
        self._copy: Associations | None = None
        self._read_at: float | None = None  # when the copy was read; None: never read (or no slurmdbd yet)
        self._none = False  # the site has no slurmdbd

    def _read(self) -> None:
        pairs = self.adapter.associations()
        now = self.clock()
        if pairs is None:
            self._none, self._copy = True, None
        else:
            self._none = False
            self._copy = Associations(frozenset(a for _, a in pairs), frozenset(p for p in pairs if p[0]))
        self._read_at = now

    def current(self, *, force: bool = False) -> Associations | None:
        """slurmdbd's associations (None: no slurmdbd). Raises what the read raised once the copy is too old."""
        with self._lock:
            now = self.clock()
            due = self._read_at is None or force or now - self._read_at >= self.ttl_s
            if due:
                try:
                    self._read()
                except Exception as exc:  # noqa: BLE001 - slurmdbd down: the last copy serves a while
                    if self._read_at is None or now - self._read_at > self.stale_s:
                        raise
                    log.warning("slurmdbd associations not read; using the last copy",
                                extra=ev(error=str(exc), age_s=round(now - self._read_at, 1)))
            return None if self._none else self._copy

    def refusal(self, user: str, account: str) -> str | None:
        """Why a launch for ``user`` under ``account`` may not be charged (``association_refusal``), read again
        once when the copy is old enough to have missed a new association; a slurmdbd that cannot be read is a
        refusal too (nothing is charged to an account burstd cannot vouch for). A lease that names no account (no
        job known: the ``(none)`` budget) has nothing to vouch for, so slurmdbd is not asked."""
        if not account:
            return None
        try:
            why = association_refusal(user, account, self.current())
            if why is not None and self._read_at is not None and self.clock() - self._read_at >= self.recheck_s:
                why = association_refusal(user, account, self.current(force=True))
        except Exception as exc:  # noqa: BLE001
            return f"slurmdbd's associations could not be read ({exc}): no launch is charged blind"
        return why


def accounting_warnings(adapter: SlurmAdapter) -> list[str]:
    """What the daemon says loudly at start when Slurm does not vouch for accounts."""
    try:
        if not adapter.accounting_enabled():
            return ["Slurm has no slurmdbd (or this backend cannot read it): `sbatch -A` is taken verbatim, so "
                    "budgets are charged to whatever account a user types; run slurmdbd with "
                    "AccountingStorageEnforce=associations (burstctl doctor)"]
        enforced = adapter.enforces_associations()
    except Exception as exc:  # noqa: BLE001 - a warning, never in the way of the start
        return [f"Slurm's accounting settings could not be read ({exc}): burstd cannot tell whether Slurm "
                "enforces associations (burstctl doctor)"]
    if enforced is False:
        return ["Slurm does not enforce associations (AccountingStorageEnforce lacks 'associations'): a user may "
                "submit with any -A; burstd charges a budget only for pairs slurmdbd associates, but set "
                "AccountingStorageEnforce=associations,limits,qos so Slurm refuses them at submission"]
    return []
