"""The daemon's own durable state besides leases: settings, capacity cooldowns (and, below, its typed records)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from burstd.db.engine import StoreBase, _now
from burstd.db.rows import _cooldown, _setting


@dataclass(frozen=True, slots=True)
class Cooldown:
    offering: str
    until: float
    reason: str



class DaemonState(StoreBase):
    # ---- settings and cooldowns --------------------------------------------------------------------------

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

