"""Per-pool launch health, kept in the store so it survives a daemon restart.

    health = PoolHealth(store, config)
    providers = make_providers(config, cooldown=health.cooldown)   # one capacity cooldown for every cloud pool
    health.record_launch_failure("aws1", "InsufficientInstanceCapacity ...", "capacity")
    health.blocked()            # {"aws1": "last launch failure: ... at 01:02:03Z"} -> no new launches there
    health.record_boot_failure("aws1", "boot timeout")  # N in a row -> protected until `burstctl cloud unprotect`

* the capacity cooldown (``OfferingCooldown``) is restored from ``Store.cooldowns`` and every mark is saved
  with ``Store.set_cooldown``;
* pool protection lives in the store's ``pool_health`` records (``burstctl cloud unprotect`` clears it through
  the API, ``PoolHealth.unprotect``), read fresh on every use so an unprotect takes effect at the next cycle;
* the last launch failure of a pool (capacity, quota, config) lives in the same record; while it
  is younger than ``cloud.capacity_cooldown_s`` and no launch in the pool has succeeded since, the pool takes no
  new jobs (they stay or go back on-prem), and ``burstctl status`` shows why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from burstd.config import Config
from burstd.daemon.cycle_errors import step_failed
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.ports import PoolHealthStore
from burstd.domain.daemon_state import PoolHealthRecord
from burstd.providers.offerings import (
    Cooling,
    OfferingCooldown,
    PoolProtection,
    ProtectionState,
    offering_key,
)

log = get_logger("pools")


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


class PoolHealth:
    def __init__(self, store: PoolHealthStore, config: Config, clock: Callable[[], float] = time.time):
        self.store = store
        self.config = config
        self.clock = clock
        self.cooldown = OfferingCooldown(config.cloud.capacity_cooldown_s, clock, on_mark=self._save_cooling)
        try:
            saved = store.cooldowns(clock())
            self.cooldown.restore({k: (c.until, c.reason) for k, c in saved.items()})
        except Exception as exc:  # noqa: BLE001 - an unreadable database must not stop the daemon's start
            step_failed(log, "cooldowns not restored", exc)

    # --- capacity cooldown -------------------------------------------------------------------
    def _save_cooling(self, c: Cooling) -> None:
        try:
            self.store.set_cooldown(offering_key(c.offering), c.until, c.reason)
        except Exception as exc:  # noqa: BLE001 - losing the persisted copy only costs a retry after restart
            step_failed(log, "cooldown not saved", exc, offering=offering_key(c.offering))

    # --- the stored records --------------------------------------------------------------------
    def _records(self) -> dict[str, PoolHealthRecord]:
        return self.store.pool_health()

    def _record(self, pool: str) -> PoolHealthRecord:
        return self._records().get(pool, PoolHealthRecord(pool))

    def _save(self, record: PoolHealthRecord) -> None:
        self.store.save_pool_health(record, at=self.clock())

    # --- protected mode ----------------------------------------------------------------------
    def protection(self) -> PoolProtection:
        """Protected mode as stored: read fresh on every use, so an admin's unprotect counts at the next cycle."""
        return PoolProtection.from_dict(
            {r.pool: {"consecutive_failures": r.consecutive_boot_failures, "protected": r.protected,
                      "reason": r.protected_reason, "since": r.protected_since} for r in self._records().values()},
            self.config.cloud.protect_after_boot_failures, self.clock)

    def _save_protection(self, pool: str, st: ProtectionState) -> None:
        self._save(replace(self._record(pool), consecutive_boot_failures=st.consecutive_failures,
                           protected=st.protected, protected_reason=st.reason, protected_since=st.since))

    def record_boot_failure(self, pool: str, reason: str) -> ProtectionState:
        prot = self.protection()
        was = prot.is_protected(pool)
        state = prot.record_boot_failure(pool, reason)
        self._save_protection(pool, state)
        if state.protected and not was:
            log.error("pool enters protected mode", extra=ev(pool=pool, reason=state.reason))
        return state

    def record_boot_success(self, pool: str) -> None:
        prot = self.protection()
        if prot.state(pool).consecutive_failures:
            self._save_protection(pool, prot.record_boot_success(pool))

    def unprotect(self, pool: str) -> str:
        """Take ``pool`` out of protected mode (``burstctl cloud unprotect``); returns the reason it was in.
        Raises ``LookupError`` when it is not protected."""
        rec = self._record(pool)
        if not rec.protected:
            raise LookupError(f"pool {pool!r} is not in protected mode")
        self._save(replace(rec, consecutive_boot_failures=0, protected=False, protected_reason="",
                           protected_since=None))
        log.warning("pool leaves protected mode", extra=ev(pool=pool, reason=f"was: {rec.protected_reason}"))
        return rec.protected_reason

    # --- launch failures ---------------------------------------------------------------------
    def record_launch_failure(self, pool: str, reason: str, kind: str) -> None:
        self._save(replace(self._record(pool), launch_failure_reason=reason, launch_failure_kind=kind,
                           launch_failure_at=self.clock()))

    def record_launch_success(self, pool: str) -> None:
        rec = self._record(pool)
        if rec.launch_failure_at is not None:
            self._save(replace(rec, launch_failure_reason="", launch_failure_kind="", launch_failure_at=None))

    def blocked(self) -> dict[str, str]:
        """Pools that take no new launches now -> why (protected mode, or a recent capacity/quota/config failure)."""
        now = self.clock()
        out: dict[str, str] = {}
        for pool, rec in self._records().items():
            at = rec.launch_failure_at
            if at is not None and now - at < self.config.cloud.capacity_cooldown_s:
                out[pool] = f"last launch failure: {rec.launch_failure_reason} at {_utc(at)}"
        prot = self.protection()
        for pool in {p.name for p in self.config.pools}:
            st = prot.state(pool)
            if st.protected:
                out[pool] = f"pool {pool} is in protected mode ({st.reason}); `burstctl cloud unprotect {pool}`"
        return out

    def status(self) -> dict[str, dict]:
        """Per pool, for ``/v1/status``: last launch failure, protection, offerings cooling down."""
        records = self._records()
        blocked = self.blocked()
        cooling = [{"offering": offering_key(c.offering), "until": c.until, "reason": c.reason}
                   for c in self.cooldown.active()]
        out = {}
        for p in self.config.pools:
            r = records.get(p.name, PoolHealthRecord(p.name))
            out[p.name] = {
                "last_launch_failure": None if r.launch_failure_at is None else {
                    "reason": r.launch_failure_reason, "kind": r.launch_failure_kind, "at": r.launch_failure_at,
                    "text": f"last launch failure: {r.launch_failure_reason} at {_utc(r.launch_failure_at)}"},
                "protected": r.protected, "protected_reason": r.protected_reason,
                "protected_since": r.protected_since, "consecutive_boot_failures": r.consecutive_boot_failures,
                "launching": p.name not in blocked, "blocked_reason": blocked.get(p.name),
                "cooldowns": cooling if p.provider != "local" else [],
            }
        return out
