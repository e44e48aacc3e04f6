"""A burst job's story from burstd's own records: where it ran, how often its node was taken away and the job
requeued, and what it cost. What ``burstctl jobs`` lists and ``burstctl explain`` says for a job that has left
the queue.

    histories = job_histories(leases, allocations_by_lease, spend_intervals, events, data_spend)
    histories[0].sentence()  # job 4242 (chem/alice): ran on cloud3 (aws-spot, spot), preempted once, ...

Pure: the records in, the stories out. The records are the lease (node, pool, market), its allocations (which
job held its node and when, from every cycle's Slurm snapshot), the spend ledger (compute charged per job, and the
job's data transfers and storage) and the lease events (a FAILED event lists the jobs burstd requeued, and says
whether the node was preempted). Slurm's own accounting (the job's outcome, every run, requeues burstd did not
make) is joined on afterwards by ``burstd.report.job_accounting``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from burstd.domain.budget import Allocation, SpendInterval
from burstd.domain.data import DataSpend
from burstd.domain.lease import Lease, LeaseEvent, LeaseState
from burstd.domain.money import DATA_SPEND_KINDS, format_usd

if TYPE_CHECKING:
    from burstd.report.job_accounting import SlurmAccount

STATES = ("running", "ended")


@dataclass(frozen=True, slots=True)
class Run:
    """One stay of a job on one cloud node (one lease)."""

    lease_id: str
    node: str
    pool: str
    market: str
    start: float
    end: float | None  # None: still there
    ended_by: str = ""  # "preempted" / "node lost" (the job was requeued), else ""
    # how the lease ended under this run, when the run was the last on its node: "preempted" / "node lost" / ""
    # (a job that requeued itself on a notice has left the node by then: burstd requeued nothing, ended_by is "")
    lease_lost: str = ""


@dataclass(slots=True)
class JobHistory:
    job_id: int
    account: str = ""
    user: str | None = None
    runs: list[Run] = field(default_factory=list)
    requeues: int = 0  # times it went back to the queue (burstd's requeues; with Slurm's count joined, all)
    requeued_by_burstd: int = 0  # of those, burstd's after its cloud node was lost
    preemptions: int = 0  # runs ended by a preemption (a notice, or the provider reclaimed the node)
    cost_by_market: dict[str, int] = field(default_factory=dict)  # compute, micro-dollars, by spot / on-demand
    data_cost: dict[str, int] = field(default_factory=dict)  # transfer_in / transfer_out / storage, micro-dollars
    accounting: SlurmAccount | None = None  # Slurm's record of it (burstd.report.job_accounting), once joined

    @property
    def compute_micros(self) -> int:
        return sum(self.cost_by_market.values())

    @property
    def cost_micros(self) -> int:
        return self.compute_micros + sum(self.data_cost.values())

    @property
    def cost_by_kind(self) -> dict[str, int]:
        """Every kind ``burstctl spend --by kind`` knows, zero included: compute, transfer_in, transfer_out,
        storage."""
        return {"compute": self.compute_micros, **{k: self.data_cost.get(k, 0) for k in DATA_SPEND_KINDS}}

    @property
    def state(self) -> str:
        return "running" if any(r.end is None for r in self.runs) else "ended"

    @property
    def first_start(self) -> float:
        return min((r.start for r in self.runs), default=0.0)

    @property
    def last_end(self) -> float | None:
        return None if self.state == "running" else max((r.end or 0.0 for r in self.runs), default=None)

    def as_dict(self) -> dict[str, Any]:
        acct = self.accounting
        return {"job_id": self.job_id, "slurm_id": acct.slurm_id if acct else str(self.job_id),
                "account": self.account, "user": self.user, "state": self.state,
                "outcome": acct.outcome if acct else None,
                "first_start": self.first_start, "last_end": self.last_end,
                "nodes": list(dict.fromkeys(r.node for r in self.runs)),
                "pools": list(dict.fromkeys(r.pool for r in self.runs)),
                "runs": [{"lease_id": r.lease_id, "node": r.node, "pool": r.pool, "market": r.market,
                          "start": r.start, "end": r.end, "ended_by": r.ended_by} for r in self.runs],
                "preemptions": self.preemptions, "requeues": self.requeues,
                "requeues_by_burstd": self.requeued_by_burstd,
                "cost_micro_usd": self.cost_micros,
                "cost_by_kind_micro_usd": self.cost_by_kind,
                "cost_by_market_micro_usd": dict(sorted(self.cost_by_market.items())),
                "slurm": acct.as_dict() if acct else None,
                "sentence": self.sentence()}

    def sentence(self) -> str:
        where = ", then ".join(f"{r.node} ({r.pool}, {r.market})" for r in self.runs)
        parts = [f"{'running' if self.state == 'running' else 'ran'} on {where}"]
        if self.preemptions:
            parts.append(f"preempted {_times(self.preemptions)}")
        if self.requeues:
            parts.append(f"requeued {_times(self.requeues)}")
        lost = self.requeued_by_burstd - self.preemptions
        if lost > 0:
            parts.append(f"its node lost otherwise {_times(lost)}")
        cost = f"cost {format_usd(self.cost_micros)}" + (" so far" if self.state == "running" else "")
        # what it paid for: compute by market (spot, on-demand), then data by kind (transfer in, out, storage)
        split = [*sorted((m, v) for m, v in self.cost_by_market.items() if v),
                 *((k.replace("_", " "), self.data_cost[k]) for k in DATA_SPEND_KINDS if self.data_cost.get(k))]
        if len(split) > 1:
            cost += " (" + ", ".join(f"{k} {format_usd(v)}" for k, v in split) + ")"
        parts.append(cost)
        who = f"{self.account or '-'}/{self.user}" if self.user else (self.account or "-")
        told = f"job {self.accounting.slurm_id if self.accounting else self.job_id} ({who}): " + ", ".join(parts)
        return told + (f"; {self.accounting.sentence()}" if self.accounting else "")


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _ended_by(event: LeaseEvent) -> str:
    return "preempted" if event.reason.startswith("preempted") else "node lost"


def job_histories(leases: Iterable[Lease], allocations: Mapping[str, Sequence[Allocation]],
                  spend: Iterable[SpendInterval], events: Iterable[LeaseEvent],
                  data: Iterable[DataSpend] = ()) -> list[JobHistory]:
    """Every job that held one of ``leases``' nodes, newest first. ``allocations``: per lease id; ``spend``
    and ``events``: those of these leases (others are ignored); ``data``: data costs booked to jobs (those of
    jobs with no story here are ignored)."""
    by_id = {le.lease_id: le for le in leases}
    requeued: dict[str, dict[int, str]] = defaultdict(dict)  # lease -> job -> how its run ended
    lost_how: dict[str, str] = {}  # lease -> how it failed under its jobs
    for e in events:
        if e.lease_id in by_id and e.to_state == LeaseState.FAILED:
            lost_how[e.lease_id] = _ended_by(e)
            for job in (e.extra or {}).get("requeue") or ():
                requeued[e.lease_id][int(job)] = _ended_by(e)
    jobs: dict[int, JobHistory] = {}
    for lease_id, allocs in allocations.items():
        lease = by_id.get(lease_id)
        if lease is None:
            continue
        last_start = max((a.start for a in allocs), default=0.0)
        for a in allocs:
            h = jobs.setdefault(a.job_id, JobHistory(a.job_id))
            h.account, h.user = a.account or h.account, a.user or h.user
            ended_by = requeued[lease_id].get(a.job_id, "")
            end = a.end if a.end is not None or lease.is_live else (lease.ended_at or lease.state_since)
            last = a.end is None or a.end >= last_start  # no other job took the node after it
            h.runs.append(Run(lease_id, lease.node_name, lease.pool, lease.market, a.start, end, ended_by,
                              lost_how.get(lease_id, "") if last else ""))
    for lease_id, lost in requeued.items():  # a requeue recorded with no allocation still counts
        for job, how in lost.items():
            h = jobs.setdefault(job, JobHistory(job))
            h.requeues += 1
            h.requeued_by_burstd += 1
            h.preemptions += how == "preempted"
    costs: dict[int, Counter[str]] = defaultdict(Counter)
    for s in spend:
        if s.job_id is not None and s.lease_id in by_id:
            costs[s.job_id][by_id[s.lease_id].market] += s.cost_micros
    for job, cost in costs.items():
        jobs.setdefault(job, JobHistory(job)).cost_by_market = dict(cost)
    for d in data:
        if d.job_id is not None and d.job_id in jobs:
            h = jobs[d.job_id]
            h.data_cost[d.kind] = h.data_cost.get(d.kind, 0) + d.cost_micros
    for h in jobs.values():
        h.runs.sort(key=lambda r: r.start)
        if not h.runs:  # known only from a requeue or a charge: the lease says where
            h.runs = [Run(le.lease_id, le.node_name, le.pool, le.market, le.launched_at or le.created_at,
                          None if le.is_live else le.ended_at, "") for le in by_id.values() if h.job_id in le.job_ids]
    return sorted(jobs.values(), key=lambda h: (-h.first_start, -h.job_id))


def select_histories(histories: Iterable[JobHistory], *, job: int | None = None, account: str | None = None,
                     user: str | None = None, state: str | None = None,
                     since: float | None = None) -> list[JobHistory]:
    """The histories matching every filter given (``since``: running, or ended at or after it)."""
    if state is not None and state not in STATES:
        raise ValueError(f"state {state!r}: use one of {', '.join(STATES)}")
    return [h for h in histories
            if (job is None or h.job_id == job) and (account is None or h.account == account)
            and (user is None or h.user == user) and (state is None or h.state == state)
            and (since is None or h.last_end is None or h.last_end >= since)]
