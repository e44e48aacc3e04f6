"""Named simulation settings: a group of simulator options under one name (``burstctl simulate --setting``).

``starburst`` is the setting of Starburst's simulator (ATC '24, "Starburst: A Cost-aware Scheduler for
Hybrid Cloud"; github.com/michaelzhiluo/starburst, ``skyburst/``), read from its code:

- on-prem: 8-GPU nodes, jobs placed first fit on whole nodes (``Cluster.try_fit_v2``, binpack
  "first-fit"), strict FIFO with no backfill (``sched_alg`` fifo, ``loop`` 0, ``backfill`` off);
- cloud: unlimited, no boot delay, one market; a job's cost is GPUs x run hours (``job.cost``), so the
  cloud here is one-GPU nodes priced per GPU-hour (``gpu_slices``);
- compute-wait (``linear_cost``): wait = beta x the job's GPU-hours, beta = 0.076 h per GPU-hour (its
  Philly end-to-end runs, ``simulator_scripts/fig7.sh``), no floor, no cap (``clip_time`` 1e9 h);
  constant-wait (``constant-1``): 1 h; no-wait (``zero``) is our ``ondemand-all``;
- metrics leave out the first and the last 5,000 jobs by arrival order (``warmup_jobs``), cost included;
- Philly: its real arrivals (``dataset`` philly, no rescaling) on 232 nodes x 8 GPUs.

Every policy stays runnable in a setting; explicit options (``--boot-s``, ``--market``, ...) override
the setting's. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from burstd.config import YEAR_S, Config, parse_config
from burstd.simulate.placement import PLACEMENTS
from burstd.simulate.policies import UNLIMITED_USD

SETTINGS = ("starburst",)
BILLING = ("node-hour", "gpu-hour")  # --bill-per: gpu-hour is ``Setting.gpu_slices``
# Starburst's beta for compute-wait: 0.076 hours of wait per GPU-hour
STARBURST_BETA_H = 0.076


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    placement: str  # on-prem: "fluid" or "first-fit"
    backfill_depth: int  # 0: strict FIFO
    gpu_slices: bool  # cloud billed (and compute-wait measured) per GPU-hour
    warmup_jobs: int  # left out of the metrics at each end of the replay
    boot_s: float
    market: str | None
    onprem_gpus: int
    gpus_per_node: int
    constant_wait_s: float
    site: dict[str, Any]  # the burstd.toml-shaped site: the cloud pool and the waiting knobs

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}; known: {', '.join(PLACEMENTS)}")

    def config(self) -> Config:
        return parse_config(self.site, f"<simulate setting {self.name}>")


STARBURST = Setting(
    name="starburst", placement="first-fit", backfill_depth=0, gpu_slices=True, warmup_jobs=5000, boot_s=0.0,
    market="on-demand", onprem_gpus=232 * 8, gpus_per_node=8, constant_wait_s=3600.0,
    site={
        # one V100 a node (p3.2xlarge, us-east-1 list price early 2024): $ per GPU-hour; only the ratios
        # between policies matter, as in Starburst (cost in GPU-hours)
        "pools": [{"name": "aws-v100", "provider": "local", "partition": "cloud-v100", "node_prefix": "v",
                   "node_count": 100_000,  # Starburst's cloud has no limit
                   "instance_types": [{"name": "p3.2xlarge", "cpus": 8, "memory_mb": 61 * 1024, "gpus": 1,
                                       "gpu_type": "v100"}],
                   "market": "spot", "price_per_hour": 0.918, "ondemand_price_per_hour": 3.06}],
        "budget": {"default_account_usd": UNLIMITED_USD},
        "policy": {"onprem_partitions": ["batch"], "waiting": {
            # compute-wait = beta x GPU-hours, no floor, no cap (a year is the config's upper bound)
            # (burstd's own knobs: the daemon's defaults, which count GPU-hours here)
            "min_wait_s": 0.0, "wait_per_node_hour_s": STARBURST_BETA_H * 3600.0, "max_wait_s": YEAR_S}},
    },
)


def get_setting(name: str) -> Setting:
    if name != STARBURST.name:
        raise ValueError(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}")
    return STARBURST
