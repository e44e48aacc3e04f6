"""Budget checks at the API's edge.

``burstctl budget set ACCOUNT USD`` for an account burstd has never seen is *accepted with a warning*, not
refused: Slurm sites without slurmdbd (and many with it) have no authoritative account list burstd can read,
and an admin must be able to give a new group a budget before its first job is queued. The warning names
the accounts burstd does know, so a typo ("chme" for "chem") is caught at once. What "known" means:

* an account of any job in the daemon's last Slurm snapshot (pending, running, completing), or in a fresh
  one taken before warning (a job submitted since the last cycle counts);
* an account with a budget in ``[budget.accounts]`` of the config or already in the database;
* an account some lease was charged to (it ran on the cloud before).
"""

from __future__ import annotations

from burstd.domain.budget import SITE


def known_accounts(rec, config) -> set[str]:
    known: set[str] = set(config.budget.accounts)
    snap = rec.last_snapshot
    if snap is not None:
        known.update(j.account for j in snap.jobs if j.account)
    try:
        known.update(b.account for b in rec.store.budgets())
    except Exception:  # noqa: BLE001 - a read failure only loses the warning's precision
        pass
    try:
        known.update(lease.account for lease in rec.store.leases() if lease.account)
    except Exception:  # noqa: BLE001
        pass
    known.discard(SITE)
    return known


def unknown_account_warning(account: str, rec, config) -> str | None:
    """A warning when ``account`` is not known (see the module doc), else None."""
    if account == SITE:
        return None
    known = known_accounts(rec, config)
    if account in known:
        return None
    # The last cycle's snapshot may predate a job submitted a moment ago: ask Slurm once more before warning.
    try:
        fresh = rec.adapter.snapshot()
    except Exception:  # noqa: BLE001 - Slurm unreachable: warn from what we knew
        fresh = None
    if fresh is not None and any(j.account == account for j in fresh.jobs):
        return None
    listed = ", ".join(sorted(known)[:20]) or "none yet"
    return (f"account {account!r} is not in Slurm's queue, the config or the budget table (known accounts: "
            f"{listed}); the budget is stored and applies once jobs of {account!r} appear. "
            "Check the spelling.")
