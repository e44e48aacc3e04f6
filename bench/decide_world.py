"""A synthetic queue for decide() benchmarks and scaling tests: P pending jobs, N on-prem nodes."""

from __future__ import annotations

import random

from burstd.config import Config, parse_config
from burstd.domain.budget import AccountBudget, BudgetBook
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.slurm import Gres, Job, Node, Snapshot

NOW = 1_700_000_000.0


def world(pending: int, nodes: int, seed: int = 7) -> tuple[Snapshot, list[Lease], BudgetBook, Config]:
    rng = random.Random(seed)
    accounts = [f"acct{i}" for i in range(50)]
    pools = [
        {"name": "cpu-spot", "provider": "local", "partition": "cloud-cpu", "node_prefix": "cc", "node_count": 5000,
         "instance_types": [{"name": "c", "cpus": 32, "memory_mb": 128000}], "price_per_hour": 0.6,
         "ondemand_price_per_hour": 1.5},
        {"name": "gpu-spot", "provider": "local", "partition": "cloud-gpu", "node_prefix": "gg", "node_count": 2000,
         "instance_types": [{"name": "g", "cpus": 96, "memory_mb": 1100000, "gpus": 8, "gpu_type": "a100"}],
         "price_per_hour": 11.8, "ondemand_price_per_hour": 32.8},
        {"name": "mem-od", "provider": "local", "partition": "cloud-mem", "node_prefix": "mm", "node_count": 500,
         "instance_types": [{"name": "m", "cpus": 64, "memory_mb": 512000}], "market": "on-demand",
         "price_per_hour": 4.0},
    ]
    cfg = parse_config({"pools": pools, "budget": {"default_account_usd": 5000.0, "site_usd": 1e6}})
    node_objs = tuple(Node(f"n{i}", "ALLOCATED", partitions=("batch",), cpus=32, memory_mb=128000,
                           gres=(Gres("gpu", "a100", 8),) if i % 10 == 0 else ()) for i in range(nodes))
    jobs: list[Job] = []
    jid = 1
    for i in range(nodes):  # one running job a node
        jobs.append(Job(jid, "r", "u", rng.choice(accounts), ("batch",), "RUNNING", start_time=int(NOW - 3600),
                        end_time=int(NOW + rng.randint(60, 48 * 3600)), time_limit_min=48 * 60, cpus=32,
                        nodes=f"n{i}"))
        jid += 1
    shapes = [(1, 1, 4000, ()), (8, 1, 16000, ()), (32, 1, 64000, ()), (64, 2, 100000, ()),
              (12, 1, 100000, (Gres("gpu", "a100", 1),)), (96, 1, 900000, (Gres("gpu", None, 8),)),
              (48, 1, 400000, ())]
    for i in range(pending):
        cpus, n, mem, gres = rng.choice(shapes)
        jobs.append(Job(jid, "p", f"user{i % 500}", rng.choice(accounts), ("batch",), "PENDING",
                        reason=rng.choice(["Resources", "Priority", "Priority", "Dependency"]),
                        priority=rng.randint(1, 100000), submit_time=int(NOW - rng.randint(0, 86400)),
                        time_limit_min=rng.choice([30, 60, 240, 1440]), node_count=n, cpus=cpus * n,
                        memory_mb=mem, gres=gres, comment="burst:no" if i % 50 == 0 else ""))
        jid += 1
    leases = [Lease(f"L{i}", "cpu-spot", f"cc{i + 1}", LeaseState.READY, price_per_hour_micros=600_000,
                    launched_at=NOW - 600, job_ids=(), account=rng.choice(accounts)) for i in range(nodes // 10)]
    book = BudgetBook(NOW - 86400, NOW + 29 * 86400, accounts={a: AccountBudget(a, None, rng.randint(0, 10**9))
                                                               for a in accounts})
    return Snapshot(NOW, tuple(jobs), node_objs), leases, book, cfg
