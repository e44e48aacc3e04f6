"""Builders for policy tests: a small cluster, jobs, pools and budget books."""

from __future__ import annotations

from burstd.config import Config, parse_config
from burstd.domain.budget import AccountBudget, BudgetBook
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.slurm import Gres, Job, Node, Snapshot

NOW = 1_000_000.0


def config(pools: list[dict] | None = None, policy: dict | None = None, budget: dict | None = None) -> Config:
    if pools is None:
        pools = [pool()]
    return parse_config({"pools": pools, "policy": policy or {}, "budget": budget or {}})


def pool(name: str = "aws-cpu", partition: str = "cloud", prefix: str = "c", count: int = 20, cpus: int = 8,
         memory_mb: int = 32000, gpus: int = 0, gpu_type: str | None = None, price: float = 1.0,
         ondemand: float | None = 3.0, market: str = "spot", **extra) -> dict:
    it = {"name": "t", "cpus": cpus, "memory_mb": memory_mb, "gpus": gpus}
    if gpu_type:
        it["gpu_type"] = gpu_type
    d = {"name": name, "provider": "local", "partition": partition, "node_prefix": prefix, "node_count": count,
         "instance_types": [it], "price_per_hour": price, "market": market}
    if ondemand is not None:
        d["ondemand_price_per_hour"] = ondemand
    d.update(extra)
    return d


def onprem_nodes(n: int = 4, cpus: int = 8, gpus: int = 0) -> tuple[Node, ...]:
    gres = (Gres("gpu", None, gpus),) if gpus else ()
    return tuple(Node(f"n{i}", "ALLOCATED", partitions=("batch",), cpus=cpus, gres=gres) for i in range(n))


def running(job_id: int, cpus: int = 8, end_in_s: float = 36000, account: str = "chem",
            partition: str = "batch", limit_min: int = 600) -> Job:
    return Job(job_id, "r", "alice", account, (partition,), "RUNNING", start_time=int(NOW - 60),
               end_time=int(NOW + end_in_s), time_limit_min=limit_min, cpus=cpus)


def pending(job_id: int, cpus: int = 8, account: str = "chem", waited_s: float = 3600, limit_min: int = 60,
            partitions: tuple[str, ...] = ("batch",), reason: str = "Resources", priority: int = 100,
            **extra) -> Job:
    return Job(job_id, "p", extra.pop("user", "alice"), account, partitions, "PENDING", reason=reason,
               priority=priority, submit_time=int(NOW - waited_s), time_limit_min=limit_min, cpus=cpus, **extra)


def busy_cluster(*jobs: Job, nodes: int = 4, end_in_s: float = 36000) -> Snapshot:
    run = tuple(running(10_000 + i, end_in_s=end_in_s) for i in range(nodes))
    return Snapshot(taken_at=NOW, jobs=run + tuple(jobs), nodes=onprem_nodes(nodes))


def book(accounts: dict[str, float | None] | None = None, site: float | None = None,
         spent: dict[str, float] | None = None, burn: float | None = None) -> BudgetBook:
    accounts = {"chem": 1000.0} if accounts is None else accounts
    spent = spent or {}
    acc = {a: AccountBudget(a, None if v is None else int(v * 1e6), int(spent.get(a, 0) * 1e6))
           for a, v in accounts.items()}
    return BudgetBook(NOW - 86400, NOW + 86400 * 29, None if site is None else int(site * 1e6),
                      int(sum(spent.values()) * 1e6), None if burn is None else int(burn * 1e6), acc)


def lease(i: int, pool: str = "aws-cpu", account: str = "chem", price: float = 1.0, job_ids=(),
          state: LeaseState = LeaseState.READY, market: str = "spot") -> Lease:
    return Lease(f"L{i}", pool, f"c{i}", state, market=market, price_per_hour_micros=int(price * 1e6),
                 launched_at=NOW - 600, job_ids=tuple(job_ids), account=account)
