"""The Slurm adapter: one interface (``SlurmAdapter``), three backends (cli, rest, pyslurm).

    adapter = make_adapter(config.slurm)
    snap = adapter.snapshot()          # one squeue + one sinfo, whatever the queue size
    adapter.add_partition(42, "cloud")
"""
