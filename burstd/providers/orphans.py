"""Invariant 2, "no VM without a lease": which tagged instances to terminate (pure) and doing it.

    plan = find_orphans(provider.list_instances(), live_lease_ids, now=time.time(), grace_s=120)
    collect_orphans(provider, live_lease_ids, grace_s=120, dry_run=True)   # -> the same plan, nothing done

An instance is an orphan when it is tagged with this cluster, is not already gone, is older than the grace
(launch-to-tag-listing is eventually consistent), and its lease id is not among the live leases (missing,
TERMINATED, REFUSED, or no lease tag at all).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from burstd.providers.base import Instance, Provider

log = logging.getLogger("burstd.providers.orphans")


@dataclass(frozen=True, slots=True)
class Orphan:
    instance: Instance
    reason: str


def find_orphans(instances: Iterable[Instance], live_lease_ids: Iterable[str], *, now: float,
                 grace_s: float) -> list[Orphan]:
    live = set(live_lease_ids)
    out = []
    for inst in instances:
        if inst.is_gone or inst.state == "stopping":
            continue
        if inst.lease_id in live:
            continue
        age = now - inst.launched_at
        if age < grace_s:
            continue
        why = "no burstd:lease tag" if not inst.lease_id else f"lease {inst.lease_id} is not live"
        out.append(Orphan(inst, f"{why}; up {age:.0f}s (grace {grace_s:.0f}s)"))
    return sorted(out, key=lambda o: o.instance.instance_id)


def collect_orphans(provider: Provider, live_lease_ids: Iterable[str], *, grace_s: float, dry_run: bool = False,
                    now: float | None = None) -> list[Orphan]:
    orphans = find_orphans(provider.list_instances(), live_lease_ids, now=now or time.time(), grace_s=grace_s)
    for o in orphans:
        log.warning("pool %s: orphan %s (node %s): %s%s", provider.name, o.instance.instance_id,
                    o.instance.node_name or "?", o.reason, " [dry run]" if dry_run else "; terminating")
    if orphans and not dry_run:
        provider.terminate([o.instance.instance_id for o in orphans])
    return orphans
