"""Invariant 2, "no VM without a lease": the one rule for which tagged instances are orphans (pure).

    orphans = find_orphans(provider.list_instances(), open_leases, now=time.time(), grace_s=120)

Used by the daemon's cycle (``daemon.planning.plan_orphans``, which terminates them under the leader's fence and
records each kill first) and by ``burstctl cloud gc`` (which asks the daemon: ``POST /v1/cloud/gc``). An instance
is an orphan when

* it is not already gone (terminated, reclaimed);
* no open lease owns it (its ``burstd:lease`` tag names no lease in an open state, or it has no such tag);
* it is not an untagged member of a gang that is still launching: a gang's VMs carry only the gang's tag until
  the launch labels each with its lease, and a crash in between leaves them so until the gang's relaunch (the
  same cycle) labels them;
* and it is older than the grace (launch-to-tag-listing is eventually consistent).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from burstd.domain.lease import Lease, LeaseState
from burstd.providers.base import Instance

#: A gang whose leases are in these states may still label its untagged VMs.
GANG_LAUNCHING = frozenset({LeaseState.REQUESTED, LeaseState.LAUNCHING})


@dataclass(frozen=True, slots=True)
class Orphan:
    instance: Instance
    reason: str


def find_orphans(instances: Iterable[Instance], open_leases: Iterable[Lease], *, now: float,
                 grace_s: float) -> list[Orphan]:
    """The orphans among ``instances`` (one pool's listing), given every lease in an open state; sorted by id."""
    leases = list(open_leases)
    known = {lease.lease_id for lease in leases}
    launching = {lease.gang for lease in leases if lease.gang and lease.state in GANG_LAUNCHING}
    out = []
    for inst in instances:
        if inst.is_gone or (inst.lease_id and inst.lease_id in known):
            continue
        if not inst.lease_id and inst.extra.get("gang") in launching:
            continue
        age = now - inst.launched_at
        if age < grace_s:
            continue
        why = f"lease {inst.lease_id} is not open" if inst.lease_id else "untagged instance"
        out.append(Orphan(inst, f"{why}; up {age:.0f}s (grace {grace_s:.0f}s)"))
    return sorted(out, key=lambda o: o.instance.instance_id)
