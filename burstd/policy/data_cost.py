"""Data in the decision (pure, no I/O): what moving a job's data to a pool costs in time and money, and which
jobs must not leave the site at all.

    reason = stays_home(needs, account, config.data)          # "" or why the job's data never leaves
    move = data_move(needs, pool_cfg, near_keys, run_s)        # DataMove: bytes, stage-in time, $ (in, out, storage)

Time: the inputs not already near the pool cross its link (``[pools.data] link_mbps``) before the job can start;
outputs come home after it ends, so they cost money, not start time. Money: per-GB transfer prices in and out,
and the staged bytes kept near the pool for the job's run at the per-GB-month storage price. Data already near
the pool (its cache: the caller passes the cache keys present there, ``DataItem.cache_key``) is neither moved
nor billed again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from burstd.config_data import DataConfig, PoolDataConfig
from burstd.domain.data import GB, DataMove, DataNeeds, never_leave_path
from burstd.domain.money import usd_to_micros

MONTH_S = 30 * 86400.0  # storage is priced per GB-month; a month is 30 days, as the clouds bill it


@dataclass(frozen=True, slots=True)
class DataView:
    """What ``decide()`` knows about data this cycle: each job's declaration (by job id; a job not here
    declared nothing) and, per pool, the cache keys already present near it (from the pool's cache)."""

    needs: Mapping[int, DataNeeds] = field(default_factory=dict)
    near: Mapping[str, Collection[str]] = field(default_factory=dict)


def stays_home(needs: DataNeeds | None, account: str, cfg: DataConfig) -> str:
    """Why a job's data must never leave the site ("" if it may): its own declaration, its account, or a
    declared path under a site-wide never-leave path."""
    if account and account in cfg.never_leave_accounts:
        return f"account {account} is in data.never_leave_accounts"
    if needs is None:
        return ""
    if needs.held:
        return needs.held
    if needs.never_leaves:
        return "the job declares #BURSTD data-never-leaves"
    path = never_leave_path(needs, cfg.never_leave_paths) if cfg.never_leave_paths else ""
    return f"{path} is under data.never_leave_paths" if path else ""


def _per_gb(n_bytes: int, usd_per_gb: float) -> int:
    """Micro-dollars for ``n_bytes`` at a per-GB price, rounded half-up to the micro-dollar (exact integers)."""
    if not n_bytes or not usd_per_gb:
        return 0
    return (n_bytes * usd_to_micros(usd_per_gb) + GB // 2) // GB


def transfer_micros(n_bytes: int, cfg: PoolDataConfig, direction: str) -> int:
    """What moving ``n_bytes`` to the pool (``"in"``) or home from it (``"out"``) costs at its per-GB prices."""
    if direction not in ("in", "out"):
        raise ValueError(f"transfer direction {direction!r}: use 'in' (to the pool) or 'out' (home)")
    return _per_gb(n_bytes, cfg.transfer_in_per_gb if direction == "in" else cfg.transfer_out_per_gb)


def storage_micros(n_bytes: int, seconds: float, cfg: PoolDataConfig) -> int:
    """What keeping ``n_bytes`` near the pool for ``seconds`` costs at its per-GB-month price."""
    return _per_gb(round(n_bytes * max(seconds, 0.0) / MONTH_S), cfg.storage_per_gb_month)


def transfer_seconds(n_bytes: int, link_mbps: float | None) -> float:
    """Seconds to move ``n_bytes`` over a link of ``link_mbps`` megabits a second (None: not metered, 0 s)."""
    if not n_bytes or link_mbps is None:
        return 0.0
    return n_bytes * 8 / (link_mbps * 1e6)


def data_move(needs: DataNeeds, pool: str, cfg: PoolDataConfig, near: Collection[str], run_s: float) -> DataMove:
    """The data side of bursting a job with ``needs`` to ``pool`` for ``run_s`` seconds."""
    cached = sum(i.size_bytes or 0 for i in needs.inputs if i.cache_key in near)
    bytes_in = needs.input_bytes - cached
    bytes_out = needs.output_bytes
    transfer = transfer_micros(bytes_in, cfg, "in") + transfer_micros(bytes_out, cfg, "out")
    storage = storage_micros(bytes_in + bytes_out, run_s, cfg)
    return DataMove(pool, bytes_in, cached, bytes_out, transfer_seconds(bytes_in, cfg.link_mbps), transfer, storage)

