"""The test bed: a real Slurm cluster on one machine whose nodes are network namespaces (docs/testbed.md)."""

from burstd.testbed.bed import Bed, BedError
from burstd.testbed.config import BedConfig

__all__ = ["Bed", "BedConfig", "BedError"]
