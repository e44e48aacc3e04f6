"""The burstd daemon: reconcile loop, Slurm hook entry points, control API, metrics and logs.

    burstd --config /etc/burstd/burstd.toml --foreground

``reconcile`` plans actions from one Slurm snapshot, one provider listing per pool and the leases
(pure functions returning frozen action objects) and an ``Executor`` applies them; ``service`` wires
the loop to APScheduler and the control API; ``hooks`` are the tiny Slurm power-saving programs.
"""
