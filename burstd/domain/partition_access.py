"""A cloud partition's account settings as burstd writes them, and the names it will write (issue 21 item 1).

Account and user names are chosen by users (``sbatch -A``) and by admins; only names that cannot carry a setting
of their own (no ``,`` ``=``, space or line break) go into a partition setting. A job with any other name is
held in the queue instead (``burstd.policy.cloud_access.plan_gate``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: What a Slurm account name may hold to be written into AllowAccounts/DenyAccounts.
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.@+-]{1,128}$")


def is_slurm_name(name: str) -> bool:
    """A name burstd may write into a partition setting (``ALL`` is Slurm's keyword there, never an account)."""
    return isinstance(name, str) and bool(SLURM_NAME.fullmatch(name)) and name.upper() != "ALL"


@dataclass(frozen=True, slots=True)
class PartitionAccess:
    """AllowAccounts (``allow``) or DenyAccounts (``deny``) of one partition; None = unset. Slurm honours one."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class CloudReservation:
    """burstd's MAGNETIC reservation over every cloud node. Jobs of ``denied_users`` cannot start there (Slurm has
    no per-user partition setting; a magnetic reservation with ``Users=-name`` is its per-user deny list), and
    where ``accounts`` is a tuple, only jobs charged to one of those accounts can: a reservation's account list
    holds on every release whether or not AccountingStorageEnforce has associations, where a partition's
    AllowAccounts/DenyAccounts hold from 23.02 on only with it (seen on the 22.05, 24.11 and 26.05 beds).
    ``accounts`` None: no account list; ``()``: no account may burst (written as ``Users=root Accounts=root``,
    since Slurm takes no empty list)."""

    nodes: tuple[str, ...]  # expanded node names, sorted
    denied_users: tuple[str, ...]  # sorted
    accounts: tuple[str, ...] | None = None  # sorted; the accounts that may use the cloud nodes

    @property
    def root_only(self) -> bool:
        return self.accounts == ()
