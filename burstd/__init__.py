"""burstd: burst a Slurm queue onto cloud spot VMs, within budget.

The package reads as the design (see docs/architecture.md):

* ``burstd.domain``    pure data: Slurm jobs/nodes/partitions, node leases, decisions, money
* ``burstd.policy``    pure logic: ``decide()``, budgets, spend ledger, prices
* ``burstd.slurm``     adapter: one interface, cli/rest/pyslurm backends
* ``burstd.providers`` adapter: one interface, local/aws/gcp implementations
* ``burstd.db``        adapter: SQLModel store and Alembic migrations
* ``burstd.daemon``    entry point: reconcile loop, control API, Slurm hooks
* ``burstd.agent``     entry point: cloud-node preemption watcher
* ``burstd.cli``       entry point: ``burstctl``
* ``burstd.train``     library for training scripts (checkpoint on signal, resume)
* ``burstd.testbed``   a real Slurm cluster with namespace "VMs" on one machine
* ``burstd.start_up``  a process's start without the garbage collector's passes (daemon, ranks)
"""

__version__ = "0.1.0"
