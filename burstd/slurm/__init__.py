"""The Slurm adapter: one interface (``SlurmAdapter``), three backends (cli, rest, pyslurm).

    adapter = make_adapter(config.slurm)
    snap = adapter.snapshot()          # one squeue + one node listing (+ one partition listing), any queue size
    adapter.add_partition(42, "cloud")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from burstd.slurm.base import SlurmAdapter, SlurmError

__all__ = ["SlurmAdapter", "SlurmError", "make_adapter"]


def __getattr__(name: str):
    # lazy, so that importing the package (the Slurm hooks do) stays standard library only
    if name in ("SlurmAdapter", "SlurmError"):
        from burstd.slurm import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_adapter(slurm_config=None) -> SlurmAdapter:
    """The backend named by ``slurm.backend`` ("cli", "rest" or "pyslurm"), configured from ``[slurm]``."""
    from burstd.config import SlurmConfig

    cfg = slurm_config if slurm_config is not None else SlurmConfig()
    if cfg.backend == "cli":
        from burstd.slurm.cli import CliAdapter

        return CliAdapter(cfg)
    if cfg.backend == "rest":
        from burstd.slurm.rest import RestAdapter

        return RestAdapter(cfg)
    if cfg.backend == "pyslurm":
        from burstd.slurm.pyslurm_backend import PyslurmAdapter

        return PyslurmAdapter(cfg)
    raise ValueError(f"unknown slurm.backend {cfg.backend!r} (cli, rest or pyslurm)")
