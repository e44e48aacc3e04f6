"""The cloud side of ``decide()``: what each pool offers (market, price, interruption risk), whether a job fits a
pool, and what a job is expected to cost there once spot preemptions' rework is counted. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from burstd.config import PoolConfig
from burstd.domain.budget import PriceQuote
from burstd.domain.hostlist import HostlistError, compress, expand
from burstd.domain.money import usd_to_micros
from burstd.domain.slurm import Job
from burstd.policy.budget import validate_quote
from burstd.policy.onprem_model import INF, parse_features

PriceInput = Mapping[tuple[str, str], PriceQuote] | Iterable[PriceQuote] | None


@dataclass(frozen=True, slots=True)
class Offer:
    pool: str
    partition: str
    market: str
    price_micros: int
    interruption_rate: float


@dataclass(slots=True)
class PoolView:
    cfg: PoolConfig
    cap: int
    offers: dict[str, Offer] = field(default_factory=dict)
    features: frozenset[str] = frozenset()
    gpu_types: frozenset[str | None] = frozenset()


def normalize_prices(prices: PriceInput) -> dict[tuple[str, str], PriceQuote]:
    if not prices:
        return {}
    items = prices.values() if isinstance(prices, Mapping) else prices
    out: dict[tuple[str, str], PriceQuote] = {}
    for q in items:
        validate_quote(q)
        out[(q.pool, q.market)] = q
    return out


def pool_offers(pool: PoolConfig, quotes: Mapping[tuple[str, str], PriceQuote]) -> dict[str, Offer]:
    """The markets a pool can launch in, at the quoted price (else the configured one)."""
    offers: dict[str, Offer] = {}
    configured = {pool.market: pool.price_per_hour}
    if pool.ondemand_price_per_hour is not None:
        configured.setdefault("on-demand", pool.ondemand_price_per_hour)
    for market, usd in configured.items():
        q = quotes.get((pool.name, market))
        price = q.price_per_hour_micros if q else usd_to_micros(usd)
        rate = q.interruption_rate if q else 0.0
        offers[market] = Offer(pool.name, pool.partition, market, price, rate if market == "spot" else 0.0)
    return offers


def job_fit(job: Job, pool: PoolView) -> str:
    nodes = max(job.node_count, 1)
    cpn = -(-job.cpus // nodes)
    cfg = pool.cfg
    if cpn > cfg.cpus:
        return f"needs {cpn} CPUs a node, pool {cfg.name} has {cfg.cpus}"
    if job.memory_mb and job.memory_mb > cfg.memory_mb:
        return f"needs {job.memory_mb} MiB a node, pool {cfg.name} has {cfg.memory_mb}"
    gpus = job.gpus
    if gpus > cfg.gpus:
        return f"needs {gpus} GPUs a node, pool {cfg.name} has {cfg.gpus}"
    if gpus:
        types = {g.type for g in job.gres if g.name == "gpu" and g.type}
        for t in types:
            if pool.gpu_types != frozenset({t}):
                return f"needs GPU type {t}, pool {cfg.name} has {'/'.join(sorted(str(x) for x in pool.gpu_types))}"
    alts = parse_features(job.features)
    if alts and not any(a <= pool.features for a in alts):
        return f"needs features {job.features}, pool {cfg.name} has {','.join(sorted(pool.features)) or 'none'}"
    if nodes > pool.cap:
        return f"needs {nodes} nodes, pool {cfg.name} has at most {pool.cap}"
    if job.required_nodes:
        return required_nodes_misfit(job.required_nodes, cfg)
    if job.excluded_nodes:
        return excluded_nodes_misfit(job.excluded_nodes, nodes, cfg)
    return ""


def required_nodes_misfit(required: str, cfg: PoolConfig) -> str:
    """Why a job that names its nodes (``sbatch -w``) cannot run in the pool: it runs on every node it names, so a
    burst needs all of them in the pool ("" when they are). A node list Slurm printed that does not parse is
    not the pool's either: never buy a VM the job cannot use."""
    try:
        names = expand(required)
    except HostlistError:
        names = []
    outside = [n for n in names if not cfg.has_node(n)]
    if names and not outside:
        return ""
    shown = compress(outside) if outside else required
    return f"asks for nodes {required} (sbatch -w); {shown} not in pool {cfg.name}"


def excluded_nodes_misfit(excluded: str, nodes: int, cfg: PoolConfig) -> str:
    """Why a job that excludes nodes (``sbatch -x``) cannot run in the pool: Slurm never starts it on them, so a
    burst needs ``nodes`` of the pool's others ("" when it has them). A VM bought for an excluded node would idle
    while the job stayed pending; a node list burstd cannot read could name any of them."""
    try:
        names = expand(excluded, validate=True)  # at most MAX_VALIDATED_HOSTS: a job's own text, every cycle
    except HostlistError:
        return f"excludes nodes {excluded} (sbatch -x), a list burstd cannot read"
    ours = set(cfg.node_names).intersection(names)
    if cfg.node_count - len(ours) >= nodes:
        return ""
    return (f"excludes nodes {compress(sorted(ours))} of pool {cfg.name} (sbatch -x); "
            f"{cfg.node_count - len(ours)} of its nodes left, the job needs {nodes}")


def effective_cost(offer: Offer, nodes: int, seconds: float, ckpt_s: float, boot_s: float) -> float:
    """Expected $ including rework: each preemption loses up to a checkpoint interval plus a boot."""
    hours = seconds / 3600.0
    rework_h = offer.interruption_rate * hours * (min(seconds, ckpt_s) / 2 + boot_s) / 3600.0
    return offer.price_micros * nodes * (hours + rework_h)


def spot_hours(rate_per_node_h: float, nodes: int, seconds: float, ckpt_s: float, boot_s: float) -> float:
    """Expected node-hours, boots included, a job of ``nodes`` nodes and ``seconds`` of work bills per node
    when any node's preemption (``rate_per_node_h`` each, so ``nodes`` x that for the job) restarts it from
    its last checkpoint (every ``ckpt_s``) on freshly booted nodes.

    Each checkpoint segment of length s is retried until one attempt of s + boot survives: with
    preemptions at rate r the expected time is (e^(r(s+b)) - 1) / r (the classic restart result). With
    r -> 0 this is the work plus one boot; a big job on a volatile market grows exponentially, so it is
    cheaper on-demand even at several times the price (INF: it would practically never finish on spot).
    """
    r = rate_per_node_h * nodes
    b = boot_s / 3600.0
    if r <= 0:
        return seconds / 3600.0 + b
    c = ckpt_s / 3600.0
    total_h = seconds / 3600.0
    full, rest = divmod(total_h, c) if c > 0 else (0.0, total_h)
    out = 0.0
    for seg, count in ((c, full), (rest, 1.0)):
        if count <= 0 or seg <= 0:
            continue
        x = r * (seg + b)
        if x > 50:
            return INF
        out += count * math.expm1(x) / r
    return out


def risk_cost(offer: Offer, nodes: int, units: int, seconds: float, ckpt_s: float, boot_s: float) -> float:
    """Expected $ of ``units`` node-slots (``nodes`` a task) on ``offer``: price x ``spot_hours``."""
    return offer.price_micros * units * spot_hours(offer.interruption_rate, nodes, seconds, ckpt_s, boot_s)


