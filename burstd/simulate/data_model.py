"""The simulator's data-size model (issue 24): what each replayed job reads and writes, drawn reproducibly.

    model = DataModel(median_gb=50, seed=1)
    model.needs(job_id)            # -> DataNeeds, the same for a job id under every policy

Each job reads one input. A ``shared_share`` of the jobs read one of ``datasets`` shared datasets (same content
digest: a pool that holds it serves the next job from its cache, as ``burstd.data``'s per-pool cache does); the
others read an input of their own. Sizes are log-normal with the given median and ``sigma`` (data sizes
span orders of magnitude), capped at ``max_gb``; a job writes ``output_share`` of its input back. Traces carry
no data sizes, so this is a model, not a measurement: docs/policy.md shows how the frontier moves under it.
``DEFAULT_LINK`` prices the pools' link when the site config gives none.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from burstd.domain.data import GB, DataItem, DataNeeds

# a 1 Gbit/s link; $0.09/GB each way (a typical cloud egress, and a site's own interconnect charge going out);
# $0.023/GB-month kept near the pool (object storage)
DEFAULT_LINK = {"link_mbps": 1000.0, "transfer_in_per_gb": 0.09, "transfer_out_per_gb": 0.09,
                "storage_per_gb_month": 0.023}


@dataclass(frozen=True, slots=True)
class DataModel:
    median_gb: float
    sigma: float = 1.0
    shared_share: float = 0.5
    datasets: int = 5
    output_share: float = 0.05
    max_gb: float = 10_000.0
    seed: int = 1

    def __post_init__(self) -> None:
        if not (self.median_gb >= 0 and math.isfinite(self.median_gb)):
            raise ValueError(f"data median {self.median_gb!r} GB: give a finite size of 0 or more")
        if not 0.0 <= self.shared_share <= 1.0 or self.datasets < 1:
            raise ValueError("shared_share must be within 0..1 and datasets at least 1")

    def _size(self, rng: random.Random) -> int:
        gb = min(self.max_gb, self.median_gb * math.exp(rng.gauss(0.0, self.sigma))) if self.median_gb else 0.0
        return int(gb * GB)

    def needs(self, job_id: int) -> DataNeeds:
        rng = random.Random(self.seed * 1_000_003 + job_id)  # per job: every policy sees the same data
        if rng.random() < self.shared_share:
            k = rng.randrange(self.datasets)
            size = self._size(random.Random(self.seed * 7_919 + k))  # one size per dataset
            item = DataItem(f"/datasets/shared-{k}", size, f"sha256:{k:064x}")
        else:
            size = self._size(rng)
            item = DataItem(f"/datasets/job-{job_id}", size)
        out = (DataItem(f"/results/job-{job_id}", int(size * self.output_share)),) if self.output_share else ()
        return DataNeeds((item,), out)
