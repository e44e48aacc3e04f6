"""Budget checks at the API's edge.

Where Slurm runs slurmdbd, its account list is authoritative: ``burstctl budget set ACCOUNT USD`` for an
account slurmdbd does not know is **refused** (``unknown_account_error``), naming the accounts it does know and
the ``sacctmgr`` command that creates one. Without slurmdbd there is no authoritative list, and an admin must
be able to give a new group a budget before its first job is queued: the budget is *accepted with a warning*
naming the accounts burstd has seen, so a typo ("chme" for "chem") is caught at once. What "seen" means:

* an account of any job in the daemon's last Slurm snapshot (pending, running, completing), or in a fresh
  one taken before warning (a job submitted since the last cycle counts);
* an account with a budget in ``[budget.accounts]`` of the config or already in the database;
* an account some lease was charged to (it ran on the cloud before).
"""

from __future__ import annotations

from burstd.domain.budget import SITE
from burstd.slurm.base import SlurmAdapter


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


def slurmdbd_accounts(adapter: SlurmAdapter) -> set[str] | None:
    """The accounts slurmdbd knows, or None when Slurm has no slurmdbd or the backend cannot ask (rest, pyslurm)."""
    return adapter.accounts()


def unknown_account_error(account: str, known: set[str] | None) -> str | None:
    """Why a budget for ``account`` is refused: slurmdbd (``known``) does not know it; None when it does or
    when there is no slurmdbd to ask (``known`` is None)."""
    if known is None or account == SITE or account in known:
        return None
    listed = ", ".join(sorted(known)[:20]) or "none"
    return (f"account {account!r} is not known to Slurm's accounting (slurmdbd knows: {listed}); nothing was "
            f"changed. Check the spelling, or create it first: sacctmgr add account {account}")


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
