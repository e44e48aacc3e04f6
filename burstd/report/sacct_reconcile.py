"""burstd's spend against Slurm's own accounting (``burstctl spend --reconcile``): do the jobs burstd charged
for a cloud node match the jobs slurmdbd recorded on it? Differences are reported, never hidden.

Pure: burstd's view (spend per job, and the cloud nodes each job's leases were) and sacct's rows in, a
:class:`Reconciliation` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from burstd.domain.sacct import SacctJob, SlurmInstance

OVERHEAD = "(overhead)"


def match_instances(launched: Mapping[str, str], recorded: Iterable[SlurmInstance] | None) -> dict | None:
    """burstd's instances (id -> node, those that came up) joined with Slurm's records on the instance id.
    None when Slurm records none (before 23.11, or no slurmdbd): nothing to compare."""
    if recorded is None:
        return None
    slurm = {r.instance_id: r.node for r in recorded}
    agree = sorted(i for i, node in launched.items() if slurm.get(i) == node)
    return {
        "agree": agree,
        "only_burstd": sorted(i for i in launched if i not in slurm),  # up, but Slurm never heard of it
        "other_node": {i: {"burstd": launched[i], "slurm": slurm[i]}
                       for i in sorted(launched) if i in slurm and slurm[i] != launched[i]},
        "only_slurm": sorted(i for i in slurm if i not in launched),  # on burstd's nodes, but no lease of burstd
    }


@dataclass
class Reconciliation:
    agree: list[int] = field(default_factory=list)  # same job on the same cloud nodes in both
    only_burstd: dict[int, int] = field(default_factory=dict)  # charged by burstd, not on those nodes per sacct
    only_sacct: list[int] = field(default_factory=list)  # ran on a cloud node per sacct; burstd charged nothing
    other_nodes: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)  # (burstd, sacct)
    other_account: dict[int, tuple[str, str]] = field(default_factory=dict)  # (burstd, sacct)
    agreed_micros: int = 0
    unmatched_micros: int = 0  # burstd spend on jobs sacct does not place there
    overhead_micros: int = 0  # boot/idle time: no job in either view

    @property
    def ok(self) -> bool:
        return not (self.only_burstd or self.only_sacct or self.other_nodes or self.other_account)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok, "agree": sorted(self.agree),
            "only_burstd": {str(k): {"spend_micro_usd": v} for k, v in sorted(self.only_burstd.items())},
            "only_sacct": sorted(self.only_sacct),
            "other_nodes": {str(k): {"burstd": b, "sacct": s} for k, (b, s) in sorted(self.other_nodes.items())},
            "other_account": {str(k): {"burstd": b, "sacct": s} for k, (b, s) in sorted(self.other_account.items())},
            "agreed_micro_usd": self.agreed_micros, "unmatched_micro_usd": self.unmatched_micros,
            "overhead_micro_usd": self.overhead_micros,
        }


def reconcile(spend_by_job: Mapping[str, int], job_nodes: Mapping[int, Iterable[str]],
              job_accounts: Mapping[int, str], sacct: Iterable[SacctJob], cloud_nodes: Iterable[str]) -> Reconciliation:
    """``spend_by_job``: burstd's ``/v1/spend?by=job`` (job id -> micro-dollars, plus ``(overhead)``);
    ``job_nodes`` / ``job_accounts``: the cloud nodes and account burstd attributed each job to (its leases);
    ``sacct``: slurmdbd's allocations over the same period; ``cloud_nodes``: every node of burstd's pools."""
    cloud = set(cloud_nodes)
    out = Reconciliation()
    # a requeued job has one record a run (sacct --duplicates), all under its id: it ran on the cloud nodes of
    # any of them, and was charged to the account of one that ran there (the last record alone would hide a
    # preempted cloud run behind the pending or on-prem run that followed it)
    runs: dict[int, list[SacctJob]] = {}
    for rec in sacct:
        runs.setdefault(rec.job_id, []).append(rec)
    cloud_runs = {jid: [r for r in recs if set(r.nodes) & cloud] for jid, recs in runs.items()}
    charged: dict[int, int] = {}
    for key, micros in spend_by_job.items():
        if key == OVERHEAD:
            out.overhead_micros += micros
        else:
            charged[int(key)] = charged.get(int(key), 0) + micros
    for job_id, micros in sorted(charged.items()):
        there = cloud_runs.get(job_id, [])
        on_cloud = sorted({n for r in there for n in r.nodes} & cloud)
        if not on_cloud:
            out.only_burstd[job_id] = micros
            out.unmatched_micros += micros
            continue
        mine = sorted(set(job_nodes.get(job_id, ())))
        if mine and not set(mine) <= set(on_cloud):
            out.other_nodes[job_id] = (mine, on_cloud)
        acct = job_accounts.get(job_id)
        recorded_accounts = sorted({r.account for r in there if r.account})
        if acct and recorded_accounts and acct not in recorded_accounts:
            out.other_account[job_id] = (acct, ",".join(recorded_accounts))
        if job_id not in out.other_nodes and job_id not in out.other_account:
            out.agree.append(job_id)
        out.agreed_micros += micros
    out.only_sacct = sorted(jid for jid, recs in cloud_runs.items() if recs and jid not in charged)
    return out
