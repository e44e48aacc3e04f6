"""Who may start on a cloud node that is already up (issue 21 item 1): the eligibility rule, held in Slurm and in
the queue every cycle, not only at launch. Pure: budgets, a snapshot and the rule in; restrictions and job edits
out (``burstd.daemon.cloud_gate`` carries them out).

A cloud node that is up runs any job of its partition without a resume call, so the launch guard never sees it.
Two halves close that:

* **The partition says what it can** (:func:`partition_accounts`): the accounts the rule refuses as a whole
  (``policy.exclude_accounts``, ``pools[].accounts``) and every account with no money left this period ($0, no
  budget at all, or spent) go into the cloud partition's ``DenyAccounts`` (or leave its ``AllowAccounts``), on
  top of what the admin wrote in slurm.conf. Slurm then never starts such a job there (it stays pending with
  Slurm's own reason, "account not permitted to use this partition"): no race with the cycle.
* **burstd's MAGNETIC reservation over the cloud nodes** (``burstd.daemon.cloud_gate``) says the rest in Slurm,
  just as synchronously: excluded users in its deny list (Slurm has no per-user partition setting), and the
  accounts that may burst (:func:`reservation_accounts`) as its account list, which Slurm holds on every release
  (the partition lists, from 23.02 on, only with ``AccountingStorageEnforce=associations``).
* **The queue holds the rest** (:func:`plan_gate`): Slurm cannot know the slurmdbd pairs burstd refuses to
  charge, nor carry every name, so a pending job the rule refuses (an excluded user too) loses its cloud partition
  when it has another, or is held (an admin hold, with the reason in its AdminComment) when the cloud is all it
  asked for. burstd releases its own holds when the rule allows the job again. A refused job found running on a
  cloud node (it started between submission and the next cycle) is requeued and held: it runs at most a cycle.

    access = partition_accounts(static, eligibility, pool, unfunded)   # PartitionAccess(allow=None, deny=(...))
    edits = plan_gate(snapshot, pools, refusal, unfunded, held_by_burstd)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from burstd.config import Config
from burstd.domain.budget import BudgetBook
from burstd.domain.partition_access import PartitionAccess, is_slurm_name
from burstd.domain.slurm import Job, Snapshot
from burstd.policy.budget import account_limit, site_limit
from burstd.policy.eligibility import Eligibility

def cloud_reservation(cluster_id: str) -> str:
    """The name of burstd's MAGNETIC reservation over the cloud nodes (``burstd.daemon.cloud_gate``): the one
    reservation a job may ask for and still run on a cloud node."""
    return f"burstd_{cluster_id}"


#: The AdminComment prefix of burstd's holds (a user reads it in ``scontrol show job``).
HOLD_PREFIX = "burstd-hold:"


def unfunded_accounts(book: BudgetBook, config: Config, accounts: Iterable[str]) -> frozenset[str]:
    """The accounts among ``accounts`` with no money left this period: no budget at all (``account_limit`` None),
    a $0 one, or one spent; every one of them once the site's budget is spent. Committed spend is not counted: a
    cheap job may still fit what is left, and the launch guard weighs that per lease."""
    site = site_limit(book, config)
    site_spent = site is not None and book.site_spent_micros >= site
    out = set()
    for account in accounts:
        if not account:
            continue  # a job with no account: the "(none)" budget, which no partition setting names
        limit = account_limit(book, account, config)
        ab = book.accounts.get(account)
        spent = ab.spent_micros if ab is not None else 0
        if site_spent or limit is None or spent >= limit:
            out.add(account)
    return frozenset(out)


def partition_accounts(static: PartitionAccess, eligibility: Eligibility, pool: str,
                       unfunded: Iterable[str]) -> PartitionAccess:
    """The account settings a cloud partition should carry now: the admin's ``static`` ones (slurm.conf) plus
    the rule's. With an allow list (the admin's or ``pools[].accounts``) the refused accounts leave it; without
    one they are denied. Names Slurm's setting cannot carry are left to ``plan_gate``."""
    refused = {a for a in (*eligibility.accounts, *unfunded) if is_slurm_name(a)}
    allowed = static.allow
    pool_allow = eligibility.pool_accounts.get(pool)
    if pool_allow is not None:
        allowed = tuple(a for a in (allowed if allowed is not None else sorted(pool_allow)) if a in pool_allow)
    if allowed is not None:
        kept = tuple(a for a in allowed if a not in refused)
        if kept:
            return PartitionAccess(allow=kept)
        # nobody left to allow: AllowAccounts= (empty) would mean everyone; deny all it named and all refused
        return PartitionAccess(deny=tuple(sorted({*allowed, *refused, *(static.deny or ())})))
    deny = sorted({*(static.deny or ()), *refused})
    return PartitionAccess(deny=tuple(deny) if deny else None)


def reservation_accounts(eligibility: Eligibility, pools: Iterable[str], unfunded: Iterable[str],
                         known: Iterable[str] | None) -> tuple[str, ...] | None:
    """The account list of burstd's reservation over the cloud nodes: every account slurmdbd knows (``known``)
    that the rule lets onto some pool and that has money left, sorted; ``()`` when there is none. None without
    slurmdbd (``known`` None): Slurm refuses a reservation naming an account it does not know, so there is no
    list to write, and the partition lists and the queue hold the rule alone. A job charged to any other account
    (one a user made up, an excluded or unfunded one) then cannot start on a cloud node that is up, on any
    release, enforced associations or not: the reservation is MAGNETIC, so every job is measured against it."""
    if known is None:
        return None
    refused = set(eligibility.accounts) | set(unfunded)
    pools = tuple(pools)
    return tuple(sorted(a for a in set(known) if a and is_slurm_name(a) and a not in refused
                        and any(eligibility.pool_gate(p, a) is None for p in pools)))


@dataclass(frozen=True, slots=True)
class GateEdits:
    """What the cycle does to the queue so that no refused job starts on a cloud node."""

    remove: tuple[tuple[int, str], ...] = ()  # (job, cloud partition) of jobs that keep another partition
    hold: tuple[tuple[int, str], ...] = ()  # (job, why) pending with cloud partitions only
    requeue_hold: tuple[tuple[int, str], ...] = ()  # (job, why) running on a cloud node it may not use
    release: tuple[int, ...] = ()  # burstd's holds the rule no longer refuses (or jobs no longer on the cloud)
    forget: tuple[int, ...] = ()  # burstd's holds whose job left the queue


#: Why a job may not run in a pool, by identity alone (exclusions, pool accounts, associations), or None.
Refusal = Callable[[str, Job], "str | None"]


def plan_gate(snapshot: Snapshot, pools_by_partition: Mapping[str, str], refusal: Refusal,
              unfunded: Iterable[str], held_by_burstd: Iterable[int]) -> GateEdits:
    """Pending and running jobs in cloud partitions measured against the rule (``refusal``) and the money
    (``unfunded``, for pending jobs only: a job already running was paid for at launch, or cannot be told from
    one that was). A job refused for money is held too: the partition's DenyAccounts holds only where Slurm
    enforces it (every 22.05; from 23.02 on only with ``AccountingStorageEnforce=associations``)."""
    broke = set(unfunded)
    ours = set(held_by_burstd)
    remove, hold, requeue, release = [], [], [], []
    seen = set()
    for job in snapshot.jobs:
        seen.add(job.job_id)
        clouds = [p for p in job.partitions if p in pools_by_partition]
        if job.is_pending:
            why = None
            for part in clouds:
                why = refusal(pools_by_partition[part], job)
                if why is None and job.account in broke:
                    why = f"account {job.account} has no cloud budget left"
                if why:
                    break
            onprem = [p for p in job.partitions if p not in pools_by_partition]
            if why is not None and onprem:
                remove += [(job.job_id, p) for p in clouds]
            elif why is not None:
                if not job.hold:  # ours released by someone else (a munge-holding node is a Slurm admin): again
                    hold.append((job.job_id, why))
                continue
            if job.job_id in ours:
                release.append(job.job_id)
        elif job.is_running and job.partitions[:1] and job.partitions[0] in pools_by_partition:
            # a running job's partition is the one it runs in: a cloud node; its money was weighed at launch
            if why := refusal(pools_by_partition[job.partitions[0]], job):
                requeue.append((job.job_id, why))
    forget = tuple(sorted(j for j in ours if j not in seen))
    return GateEdits(tuple(remove), tuple(hold), tuple(requeue), tuple(release), forget)


def hold_comment(why: str) -> str:
    """The AdminComment of a burstd hold: one line, bounded, no character Slurm's parser or a shell could read as
    syntax (the argv carries it; this keeps ``scontrol show job`` readable)."""
    text = re.sub(r"[^A-Za-z0-9 _.,:;'()$@+/-]", "?", why)
    return f"{HOLD_PREFIX} {text} (released when the rule allows it; burstctl explain JOB)"[:250]
