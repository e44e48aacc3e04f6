"""Built-in policies for ``burstctl simulate`` and the default simulated site for each trace kind.

Every policy is the same ``decide()`` under a different ``[policy]`` config; only ``never`` skips it:

- ``never``: no bursting (the on-prem baseline);
- ``ondemand-all``: burst every queued job at once, on-demand;
- ``spot-all``: burst every queued job at once, on spot (escalation after preemptions sends it home);
- ``constant-wait``: wait ``min_wait_s`` then burst (Starburst's constant-wait);
- ``compute-wait``: wait ``wait_per_node_hour_s`` x node-hours (Starburst's compute-wait);
- ``burstd``: the default policy (queue-aware compute-wait, see ``burstd.policy.waiting``).

The waiting policies (constant, compute, burstd) share the same pools and markets (spot with on-demand
escalation), so the comparison isolates *when* a job bursts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from burstd.config import Config, parse_config
from burstd.simulate.engine import SimResult, SimSetup, Simulator
from burstd.simulate.limits import NO_LIMITS, UserLimits
from burstd.simulate.queue_priority import NO_PRIORITY, QueuePriority
from burstd.simulate.shapes import SPOT_SHARE, fitting_shape, site_cpus, site_cpus_per_node
from burstd.simulate.spot import CPU_TRACES, GPU_TRACES, SpotModel
from burstd.simulate.traces import TraceInfo, TraceJob

MARKETS = ("on-demand", "spot")
# The replay's checkpointing assumption, stated: half the jobs checkpoint (every policy.checkpoint_interval_s,
# hourly by default), half lose all progress when preempted. Every job checkpointing hourly flattered spot;
# the historical SWF traces (MPI jobs, 1996-2000) give no sign that most of them checkpointed at all.
DEFAULT_CHECKPOINT_SHARE = 0.5
POLICIES = ("never", "ondemand-all", "spot-all", "constant-wait", "compute-wait", "burstd")

# Prices per node-hour, us-east-1 list prices (early 2024) and Spot Advisor savings: an 8-vCPU c5.2xlarge
# for CPU traces; p3 V100 nodes (1, 4, 8 GPUs) for GPU traces.
CPU_SITE: dict[str, Any] = {
    "pools": [{"name": "aws-cpu", "provider": "local", "partition": "cloud-cpu", "node_prefix": "cc",
               "node_count": 5000, "instance_types": [{"name": "c5.2xlarge", "cpus": 8, "memory_mb": 16384}],
               "market": "spot", "price_per_hour": 0.146, "ondemand_price_per_hour": 0.34}],
}
GPU_SITE: dict[str, Any] = {
    "pools": [
        {"name": f"aws-v100x{g}", "provider": "local", "partition": f"cloud-v100x{g}", "node_prefix": f"g{g}n",
         "node_count": 5000,
         "instance_types": [{"name": n, "cpus": 8 * g, "memory_mb": 61 * 1024 * g, "gpus": g, "gpu_type": "v100"}],
         "market": "spot", "price_per_hour": spot, "ondemand_price_per_hour": od}
        for g, n, spot, od in ((1, "p3.2xlarge", 0.918, 3.06), (4, "p3.8xlarge", 3.672, 12.24),
                               (8, "p3.16xlarge", 7.344, 24.48))
    ],
}
# burstd's own waiting knobs are not set here: the built-in sites (and the Starburst setting) run the
# daemon's defaults (``burstd.config_policy.WaitingPolicy``), one definition for both (issue 25).
UNLIMITED_USD = 1e12  # an account budget no replay can reach: the built-in sites' "no money limit"
SITE_DEFAULTS: dict[str, Any] = {
    "budget": {"default_account_usd": UNLIMITED_USD},  # no money limit unless the config sets one
    "policy": {"onprem_partitions": ["batch"], "waiting": {
        # compute-wait (fixed first, never tuned): 5 min per node-hour, at least 30 min, at most 6 h.
        # (burstd's own knobs: the daemon's defaults)
        "min_wait_s": 1800.0, "wait_per_node_hour_s": 300.0, "max_wait_s": 6 * 3600.0}},
}
# constant-wait's wait on the built-in sites: set (on the SDSC training prefix) so that its mean wait is at
# or above compute-wait's, so the two baselines sit at about the same wait
BUILTIN_CONSTANT_WAIT_S = 4 * 3600.0



def cpu_site_pools(cpus_per_node: int) -> list[dict]:
    """The built-in CPU pool, sized to the site's node (the smallest c5 that holds one)."""
    s = fitting_shape(cpus_per_node)
    pool = dict(CPU_SITE["pools"][0])
    pool.update(instance_types=[{"name": s.name, "cpus": s.cpus, "memory_mb": 2048 * s.cpus}],
                price_per_hour=round(s.ondemand * SPOT_SHARE, 4), ondemand_price_per_hour=s.ondemand)
    return [pool]


def default_site(gpu: bool, cpus_per_node: int = 8) -> Config:
    pools = GPU_SITE if gpu else {"pools": cpu_site_pools(cpus_per_node)}
    data: dict[str, Any] = {**pools, **SITE_DEFAULTS}
    return parse_config(data, "<built-in simulate site>")


def policy_config(base: Config, name: str, constant_wait_s: float | None = None,
                  as_configured: bool = False) -> Config:
    """``base`` under the built-in policy ``name``. ``as_configured``: the ``burstd`` row is ``base`` itself
    (a site's own config, replayed as its daemon runs it), not ``base`` with ``waiting.kind`` burstd."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; built-in: {', '.join(POLICIES)}")
    pol = base.policy
    w = pol.waiting
    pools = base.pools
    if name in ("ondemand-all", "spot-all"):
        kind = "none"
        market = "on-demand" if name == "ondemand-all" else "spot"
        new_pools = []
        for p in pools:
            if market == "on-demand":
                price = p.ondemand_price_per_hour if p.ondemand_price_per_hour is not None else p.price_per_hour
                new_pools.append(p.model_copy(update={"market": "on-demand", "price_per_hour": price,
                                                      "ondemand_price_per_hour": None}))
            else:
                new_pools.append(p.model_copy(update={"ondemand_price_per_hour": None}) if p.market == "spot" else p)
        pools = new_pools
    else:
        kind = {"never": w.kind, "constant-wait": "constant", "compute-wait": "compute",
                "burstd": w.kind if as_configured else "burstd"}[name]
    waiting = w.model_copy(update={"kind": kind})
    if name == "constant-wait" and constant_wait_s is not None:
        waiting = waiting.model_copy(update={"min_wait_s": constant_wait_s})
    update: dict = {"waiting": waiting}
    if name != "burstd":
        # the baselines as published (Starburst): spot first, on-demand after 2 spot preemptions, ranked by
        # price alone; Uniform Progress, the value of waiting and the risk-aware market are burstd's policy
        update["max_preemptions_spot"] = 2
        update["progress_slack"] = 0.0
        update["risk_aware_market"] = False
    return base.model_copy(update={"pools": pools, "policy": pol.model_copy(update=update)})


def on_market(cfg: Config, market: str) -> Config:
    """``cfg`` with every pool on one market: on-demand at its on-demand price, or spot with no on-demand
    fallback (a job preempted ``max_preemptions_spot`` times then waits on-prem)."""
    if market not in MARKETS:
        raise ValueError(f"unknown market {market!r}; known: {', '.join(MARKETS)}")
    pools = []
    for p in cfg.pools:
        if market == "on-demand":
            price = p.price_per_hour if p.market == "on-demand" else p.ondemand_price_per_hour
            if price is None:
                raise ValueError(f"pool {p.name}: no on-demand price (ondemand_price_per_hour) to simulate it on-demand")
            pools.append(p.model_copy(update={"market": "on-demand", "price_per_hour": price,
                                              "ondemand_price_per_hour": None}))
        else:
            if p.market != "spot":
                raise ValueError(f"pool {p.name}: an on-demand pool has no spot price to simulate it on spot")
            pools.append(p.model_copy(update={"ondemand_price_per_hour": None}))
    return cfg.model_copy(update={"pools": pools})


def make_setup(info: TraceInfo, gpu: bool, config: Config | None, onprem_cpus: int | None, onprem_gpus: int | None,
               spot_root: Path | None, seed: int = 1, boot_s: float = 120.0, cycle_s: float = 120.0,
               market: str | None = None, checkpoint_share: float = DEFAULT_CHECKPOINT_SHARE,
               checkpoint_s: float | None = None, *, placement: str = "fluid", gpu_slices: bool = False,
               warmup_jobs: int = 0, backfill_depth: int = 100, gpus_per_node: int = 8,
               constant_wait_s: float | None = None, out_of_order: bool = False,
               user_limits: UserLimits = NO_LIMITS, queue_priority: QueuePriority = NO_PRIORITY) -> SimSetup:
    """The replay's site; with ``config`` (a daemon's own), its burstd row runs that config as configured."""
    if gpu:
        cfg = config or default_site(gpu)
        units = onprem_gpus or 232 * 8
        upn = gpus_per_node
    else:
        units = onprem_cpus or site_cpus(info.max_procs, info.max_nodes)
        fallback = min(p.cpus for p in config.pools) if config is not None and config.pools else 8
        upn = site_cpus_per_node(info.max_procs, info.max_nodes, fallback)
        cfg = config or default_site(gpu, upn)
    if market is not None:
        on_market(cfg, market)  # fail early on a pool that cannot go on that market
    spot = None
    # None asks for a replay without preemptions; a missing folder must never quietly become one (issue 27)
    if spot_root is not None:
        if not spot_root.is_dir():
            raise ValueError(f"spot traces {spot_root}: not a folder (set --spot-traces or BURSTD_SPOT_TRACES to "
                             "a folder in the skypilot spot-traces layout, or unset them for the traces burstd ships)")
        spot = SpotModel.from_dir(spot_root, GPU_TRACES if gpu else CPU_TRACES, seed)
    if constant_wait_s is None and config is None:
        constant_wait_s = BUILTIN_CONSTANT_WAIT_S
    return SimSetup(cfg, gpu, units, upn, boot_s=boot_s, cycle_s=cycle_s, spot=spot,
                    checkpoint_s=checkpoint_s or cfg.policy.checkpoint_interval_s, checkpoint_share=checkpoint_share,
                    constant_wait_s=constant_wait_s, market=market, placement=placement,
                    gpu_slices=gpu_slices, warmup_jobs=warmup_jobs, backfill_depth=backfill_depth,
                    out_of_order=out_of_order, policy_as_configured=config is not None, user_limits=user_limits,
                    queue_priority=queue_priority)


def onprem_fit(setup: SimSetup, jobs: list[TraceJob]) -> list[TraceJob]:
    """The jobs a replay runs: those no larger than the on-prem site (a larger one could never run there)."""
    return [j for j in jobs if (j.gpus if setup.gpu else j.cpus) <= setup.onprem_units]


def run_policy(name: str, setup: SimSetup, jobs: list[TraceJob], seed: int = 1) -> SimResult:
    return policy_simulator(name, setup, jobs, seed).run()


def policy_simulator(name: str, setup: SimSetup, jobs: list[TraceJob], seed: int = 1) -> Simulator:
    """The replay ``run_policy`` runs (before it runs): for callers that want each job's outcome too."""
    base = setup.config
    # ondemand-all stays the on-demand reference that cost ratios are taken against, whatever the market
    if setup.market is not None and name != "ondemand-all":
        base = on_market(base, setup.market)
    cfg = policy_config(base, name, setup.constant_wait_s, setup.policy_as_configured)
    spot = None
    if setup.spot is not None:  # same preemption draws for every policy
        spot = SpotModel(setup.spot.segments, seed)
    s = replace(setup, config=cfg, spot=spot, decide_enabled=(name != "never"))
    return Simulator(s, onprem_fit(setup, jobs), name)
