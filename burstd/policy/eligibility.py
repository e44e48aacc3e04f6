"""Who may run on cloud nodes at all: the ONE rule behind ``decide()``'s hard gates, its pool fit, and the
daemon's launch guard (``Reconciler._refusal_fn``), so a job sent straight to a cloud partition (``sbatch -p
cloud``, which ``decide()`` never sees) meets the same exclusions as one burstd chose (issue 21 item 1). Pure.

    elig = Eligibility.of(config)
    elig.gate(job.account, job.user, job.qos)            # ("account {} is excluded", ("chem",)) or None
    elig.pool_gate("gpu", job.account)                    # "account chem may not use pool gpu" or None
    elig.refusal("gpu", job.account, job.user, job.qos)   # either, as one sentence, or None

The budget half of the rule ($0 budgets included) is ``burstd.policy.budget.check_launch``, which both callers
run after this; ``association_refusal`` is the slurmdbd half (issue 21 item 2): a budget belongs to an account
only for users Slurm's accounting associates with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from burstd.config import Config
from burstd.policy import reasons as R


@dataclass(frozen=True, slots=True)
class Eligibility:
    """The exclusions of ``policy`` and the ``pools[].accounts`` restrictions of one config."""

    accounts: frozenset[str]
    users: frozenset[str]
    qos: frozenset[str]
    pool_accounts: Mapping[str, frozenset[str] | None]  # pool -> accounts that may use it; None = every account

    @classmethod
    def of(cls, config: Config) -> Eligibility:
        pol = config.policy
        return cls(frozenset(pol.exclude_accounts), frozenset(pol.exclude_users), frozenset(pol.exclude_qos),
                   {p.name: None if p.accounts is None else frozenset(p.accounts) for p in config.pools})

    def gate(self, account: str, user: str, qos: str) -> tuple[str, tuple] | None:
        """The exclusion a job meets (a ``burstd.policy.reasons`` format and its arguments), or None."""
        if account in self.accounts:
            return R.G_ACCOUNT, (account,)
        if user in self.users:
            return R.G_USER, (user,)
        if qos and qos in self.qos:
            return R.G_QOS, (qos,)
        return None

    def pool_gate(self, pool: str, account: str) -> str | None:
        """Why ``account`` may not use ``pool`` (``pools[].accounts``), or None."""
        allowed = self.pool_accounts.get(pool)
        if allowed is not None and account not in allowed:
            return f"account {account or '(none)'} may not use pool {pool}"
        return None

    def refusal(self, pool: str, account: str, user: str, qos: str) -> str | None:
        """Why a job of ``account``/``user``/``qos`` may not run in ``pool``, as one sentence; None: it may."""
        g = self.gate(account, user, qos)
        if g is not None:
            return g[0].format(*g[1])
        return self.pool_gate(pool, account)


@dataclass(frozen=True, slots=True)
class Associations:
    """What slurmdbd vouches for: its accounts and its (user, account) associations. A site without slurmdbd has
    none (``None`` where this is passed): there ``-A`` is whatever the user typed."""

    accounts: frozenset[str]
    pairs: frozenset[tuple[str, str]]  # (user, account)


def association_refusal(user: str, account: str, assoc: Associations | None) -> str | None:
    """Why a job's account may not be charged: slurmdbd does not know the account, or does not associate the
    user with it (a site without ``AccountingStorageEnforce=associations`` lets anyone type ``-A funded``).
    None when it vouches for both, when the job names no account (the ``(none)`` budget), or without slurmdbd
    (``assoc`` None: nothing to ask; the daemon says so loudly at start)."""
    if assoc is None or not account:
        return None
    if account not in assoc.accounts:
        return (f"account {account!r} is not known to Slurm's accounting (slurmdbd): no budget is charged to it "
                "(an admin adds it with sacctmgr add account, then associates its users)")
    if user and (user, account) not in assoc.pairs:
        return (f"user {user!r} has no association with account {account!r} in slurmdbd: its budget is not "
                "theirs to spend (an admin adds one with sacctmgr add user USER account=ACCOUNT)")
    return None
