"""The daemon's own durable state besides leases and money: requests queued for the next cycle (``intent``), each
pool's launch health and protected mode (``pool_health``), the admin's pause (``pause``), the market decided for
jobs (``job_market``), capacity cooldowns, and free-form settings. Each has typed methods; nothing else writes these tables."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict

from sqlalchemy import insert, select

from burstd.db.engine import StoreBase, _now
from burstd.db.rows import _cooldown, _intent, _job_market, _pause, _pool_health, _setting
from burstd.domain.daemon_state import Cooldown, PauseState, PoolHealthRecord, StoredIntent


class DaemonState(StoreBase):
    # ---- requests queued for the next cycle -------------------------------------------------------------

    def queue_intents(self, items: Iterable[tuple[str, str, str, float]]) -> list[int]:
        """Queue (kind, node, reason, at) requests in one transaction; committed when this returns."""
        ids = []
        with self._write() as conn:
            for kind, node, reason, at in items:
                res = conn.execute(insert(_intent).values(kind=kind, node=node, reason=reason, at=float(at)))
                ids.append(int(res.inserted_primary_key[0]))
        return ids

    def intents(self) -> list[StoredIntent]:
        """Queued requests, oldest first."""
        with self._read() as conn:
            rows = conn.execute(select(_intent).order_by(_intent.c.id)).all()
        return [StoredIntent(int(r.id), r.kind, r.node, r.reason, r.at) for r in rows]

    def forget_intents(self, ids: Iterable[int]) -> int:
        """Drop requests a cycle applied. Returns how many were still queued."""
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        with self._write() as conn:
            return conn.execute(_intent.delete().where(_intent.c.id.in_(ids))).rowcount

    # ---- pool health ---------------------------------------------------------------------------------------

    def pool_health(self) -> dict[str, PoolHealthRecord]:
        with self._read() as conn:
            rows = conn.execute(select(_pool_health).order_by(_pool_health.c.pool)).all()
        return {r.pool: PoolHealthRecord(r.pool, int(r.consecutive_boot_failures), bool(r.protected),
                                         r.protected_reason, r.protected_since, r.launch_failure_reason,
                                         r.launch_failure_kind, r.launch_failure_at) for r in rows}

    def save_pool_health(self, record: PoolHealthRecord, *, at: float | None = None) -> None:
        with self._write() as conn:
            self._upsert(conn, _pool_health, ["pool"], dict(asdict(record), updated_at=_now(at)))

    # ---- pause ---------------------------------------------------------------------------------------------

    def pause_state(self) -> PauseState | None:
        """The admin's pause or resume, or None when no admin has said (the config's ``policy.paused`` holds)."""
        with self._read() as conn:
            r = conn.execute(select(_pause).where(_pause.c.id == 1)).first()
        return None if r is None else PauseState(bool(r.paused), r.reason, r.by, r.since)

    def set_pause(self, paused: bool, *, reason: str = "", by: str = "", at: float | None = None) -> PauseState:
        state = PauseState(bool(paused), reason, by[:64], _now(at))
        with self._write() as conn:
            self._upsert(conn, _pause, ["id"], dict(id=1, **asdict(state)))
        return state

    # ---- the market decided per job ------------------------------------------------------------------------

    def job_markets(self) -> dict[int, str]:
        """job id -> market, for jobs the policy decided on a market other than their pool's."""
        with self._read() as conn:
            return {int(r.job_id): r.market for r in conn.execute(select(_job_market))}

    def set_job_market(self, job_id: int, market: str | None, *, at: float | None = None) -> None:
        """Record ``market`` for ``job_id`` (None: forget it); committed when this returns."""
        with self._write() as conn:
            if market is None:
                conn.execute(_job_market.delete().where(_job_market.c.job_id == int(job_id)))
            else:
                self._upsert(conn, _job_market, ["job_id"],
                             dict(job_id=int(job_id), market=market, updated_at=_now(at)))

    def forget_job_markets(self, job_ids: Iterable[int]) -> int:
        """Drop the entries of jobs that left Slurm. Returns how many were there."""
        ids = [int(j) for j in job_ids]
        if not ids:
            return 0
        with self._write() as conn:
            return conn.execute(_job_market.delete().where(_job_market.c.job_id.in_(ids))).rowcount

    # ---- settings and cooldowns ----------------------------------------------------------------------------
    def get_setting(self, key: str, default: str | None = None) -> str | None:
        with self._read() as conn:
            v = conn.execute(select(_setting.c.value).where(_setting.c.key == key)).scalar()
        return default if v is None else v

    def set_setting(self, key: str, value: str, *, at: float | None = None) -> None:
        if not isinstance(value, str):
            raise TypeError(f"setting {key!r}: values are strings, got {type(value).__name__}")
        with self._write() as conn:
            self._upsert(conn, _setting, ["key"], dict(key=key, value=value, updated_at=_now(at)))

    def settings(self) -> dict[str, str]:
        with self._read() as conn:
            return {r.key: r.value for r in conn.execute(select(_setting).order_by(_setting.c.key))}

    def set_cooldown(self, offering: str, until: float, reason: str = "", *, at: float | None = None) -> None:
        with self._write() as conn:
            self._upsert(conn, _cooldown, ["offering"],
                         dict(offering=offering, until=float(until), reason=reason, updated_at=_now(at)))

    def cooldowns(self, now: float | None = None) -> dict[str, Cooldown]:
        """Offerings cooling down at ``now`` (expired ones are left out; ``prune_cooldowns`` deletes them)."""
        now = _now(now)
        with self._read() as conn:
            rows = conn.execute(select(_cooldown).where(_cooldown.c.until > now)).all()
        return {r.offering: Cooldown(r.offering, r.until, r.reason) for r in rows}

    def prune_cooldowns(self, now: float | None = None) -> int:
        with self._write() as conn:
            return conn.execute(_cooldown.delete().where(_cooldown.c.until <= _now(now))).rowcount

