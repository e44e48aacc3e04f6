"""``GET /v1/spend/reconcile``: burstd's spend ledger against the allocations slurmdbd recorded on the cloud
nodes (the comparison itself is ``burstd.report.sacct_reconcile``, pure). Only where Slurm runs slurmdbd and
the backend can read it (cli); otherwise ``NoAccounting``.
"""

from __future__ import annotations

import time

from burstd.report.sacct_reconcile import match_instances, reconcile
from burstd.slurm.base import SlurmAdapter

DEFAULT_WINDOW_S = 31 * 86400


class NoAccounting(Exception):
    """There is no slurmdbd to reconcile against (or the backend cannot read it)."""


def reconcile_spend(store, adapter: SlurmAdapter, config, since: float | None = None,
                    now: float | None = None) -> dict:
    if not adapter.accounting_enabled():
        raise NoAccounting("Slurm has no slurmdbd (AccountingStorageType is not accounting_storage/slurmdbd) or "
                           "slurm.backend is not \"cli\": nothing to reconcile spend against")
    since = (time.time() if now is None else now) - DEFAULT_WINDOW_S if since is None else since
    intervals = store.spend_intervals(since=since)
    leases = {lease.lease_id: lease for lease in store.leases()}
    spend_by_job: dict[str, int] = {}
    job_nodes: dict[int, set[str]] = {}
    job_accounts: dict[int, str] = {}
    for iv in intervals:
        key = "(overhead)" if iv.job_id is None else str(iv.job_id)
        spend_by_job[key] = spend_by_job.get(key, 0) + iv.cost_micros
        lease = leases.get(iv.lease_id)
        if iv.job_id is not None and lease is not None:
            job_nodes.setdefault(iv.job_id, set()).add(lease.node_name)
            job_accounts[iv.job_id] = iv.account
    cloud = [n for p in config.pools for n in p.node_names]
    # a job that started before the window may still be charged within it: ask sacct from a day earlier
    # only allocations that ran in the window: one that ended before it is not burstd's to have charged
    recorded = [j for j in adapter.sacct_jobs(since - 86400, cloud) if j.end is None or j.end >= since]
    out = reconcile(spend_by_job, job_nodes, job_accounts, recorded, cloud).to_dict()
    # the instances: every VM of burstd's that came up in the window, joined on its id with Slurm's records
    # (23.11+: the daemon records each one when its node registers); None where Slurm records none
    launched = {lease.instance_id: lease.node_name for lease in leases.values()
                if lease.instance_id and lease.ready_at is not None and lease.ready_at >= since}
    out["instances"] = match_instances(launched, adapter.instances(since, cloud))
    # a VM of burstd's that Slurm does not know (or knows on another node) is a difference; an instance Slurm lists
    # that no lease here launched (set by hand, or by a daemon with another database) is reported, not burstd's
    if out["instances"] and (out["instances"]["only_burstd"] or out["instances"]["other_node"]):
        out["ok"] = False
    out["since"] = since
    return out
