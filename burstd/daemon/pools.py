"""Per-pool launch health, kept in the store so it survives a daemon restart.

    health = PoolHealth(store, config)
    providers = make_providers(config, cooldown=health.cooldown)   # one capacity cooldown for every cloud pool
    health.record_launch_failure("aws1", "InsufficientInstanceCapacity ...", "capacity")
    health.blocked()            # {"aws1": "last launch failure: ... at 01:02:03Z"} -> no new launches there
    health.record_boot_failure("aws1", "boot timeout")  # N in a row -> protected until `burstctl cloud unprotect`

* the capacity cooldown (``OfferingCooldown``) is restored from ``Store.cooldowns`` and every mark is saved
  with ``Store.set_cooldown``;
* pool protection lives in the setting ``pool_protection`` (the one ``burstctl cloud unprotect`` edits), read
  fresh on every use so an admin's unprotect takes effect at the next cycle;
* the last launch failure of a pool (capacity, quota, config) lives in the setting ``launch_failures``; while it
  is younger than ``cloud.capacity_cooldown_s`` and no launch in the pool has succeeded since, the pool takes no
  new jobs (they stay or go back on-prem), and ``burstctl status`` shows why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

from burstd.config import Config
from burstd.daemon.logging import ev, get_logger
from burstd.providers.offerings import (
    Cooling,
    OfferingCooldown,
    PoolProtection,
    ProtectionState,
    offering_key,
)

log = get_logger("pools")
PROTECTION_SETTING = "pool_protection"
LAUNCH_FAILURES_SETTING = "launch_failures"


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


class PoolHealth:
    def __init__(self, store, config: Config, clock: Callable[[], float] = time.time):
        self.store = store
        self.config = config
        self.clock = clock
        self.cooldown = OfferingCooldown(config.cloud.capacity_cooldown_s, clock, on_mark=self._save_cooling)
        try:
            saved = store.cooldowns(clock())
            self.cooldown.restore({k: (c.until, c.reason) for k, c in saved.items()})
        except Exception as exc:  # noqa: BLE001 - a store without cooldowns must not stop the daemon
            log.warning("cooldowns not restored", extra=ev(error=str(exc)))

    # --- capacity cooldown -------------------------------------------------------------------
    def _save_cooling(self, c: Cooling) -> None:
        try:
            self.store.set_cooldown(offering_key(c.offering), c.until, c.reason)
        except Exception as exc:  # noqa: BLE001 - losing the persisted copy only costs a retry after restart
            log.warning("cooldown not saved", extra=ev(offering=offering_key(c.offering), error=str(exc)))

    # --- settings as JSON --------------------------------------------------------------------
    def _load(self, key: str) -> dict:
        try:
            data = json.loads(self.store.get_setting(key) or "{}")
        except (ValueError, TypeError):
            log.error("setting is not JSON; ignored", extra=ev(setting=key))
            return {}
        except (AttributeError, NotImplementedError):  # a store without settings (unit-test fakes)
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, key: str, data: dict) -> None:
        self.store.set_setting(key, json.dumps(data, sort_keys=True))

    # --- protected mode ----------------------------------------------------------------------
    def protection(self) -> PoolProtection:
        return PoolProtection.from_dict(self._load(PROTECTION_SETTING), self.config.cloud.protect_after_boot_failures,
                                        self.clock)

    def record_boot_failure(self, pool: str, reason: str) -> ProtectionState:
        prot = self.protection()
        was = prot.is_protected(pool)
        state = prot.record_boot_failure(pool, reason)
        self._save(PROTECTION_SETTING, prot.to_dict())
        if state.protected and not was:
            log.error("pool enters protected mode", extra=ev(pool=pool, reason=state.reason))
        return state

    def record_boot_success(self, pool: str) -> None:
        prot = self.protection()
        if prot.state(pool).consecutive_failures:
            prot.record_boot_success(pool)
            self._save(PROTECTION_SETTING, prot.to_dict())

    # --- launch failures ---------------------------------------------------------------------
    def record_launch_failure(self, pool: str, reason: str, kind: str) -> None:
        data = self._load(LAUNCH_FAILURES_SETTING)
        data[pool] = {"reason": reason, "kind": kind, "at": self.clock()}
        self._save(LAUNCH_FAILURES_SETTING, data)

    def record_launch_success(self, pool: str) -> None:
        data = self._load(LAUNCH_FAILURES_SETTING)
        if pool in data:
            del data[pool]
            self._save(LAUNCH_FAILURES_SETTING, data)

    def blocked(self) -> dict[str, str]:
        """Pools that take no new launches now -> why (protected mode, or a recent capacity/quota/config failure)."""
        now = self.clock()
        out: dict[str, str] = {}
        prot = self.protection()
        for pool, fail in self._load(LAUNCH_FAILURES_SETTING).items():
            at = float(fail.get("at") or 0.0)
            if now - at < self.config.cloud.capacity_cooldown_s:
                out[pool] = f"last launch failure: {fail.get('reason', '')} at {_utc(at)}"
        for pool in {p.name for p in self.config.pools}:
            st = prot.state(pool)
            if st.protected:
                out[pool] = f"pool {pool} is in protected mode ({st.reason}); `burstctl cloud unprotect {pool}`"
        return out

    def status(self) -> dict[str, dict]:
        """Per pool, for ``/v1/status``: last launch failure, protection, offerings cooling down."""
        failures = self._load(LAUNCH_FAILURES_SETTING)
        prot = self.protection()
        blocked = self.blocked()
        cooling = [{"offering": offering_key(c.offering), "until": c.until, "reason": c.reason}
                   for c in self.cooldown.active()]
        out = {}
        for p in self.config.pools:
            f = failures.get(p.name)
            st = prot.state(p.name)
            out[p.name] = {
                "last_launch_failure": None if f is None else {
                    "reason": f.get("reason", ""), "kind": f.get("kind", ""), "at": f.get("at"),
                    "text": f"last launch failure: {f.get('reason', '')} at {_utc(float(f.get('at') or 0))}"},
                "protected": st.protected, "protected_reason": st.reason, "protected_since": st.since,
                "consecutive_boot_failures": st.consecutive_failures,
                "launching": p.name not in blocked, "blocked_reason": blocked.get(p.name),
                "cooldowns": cooling if p.provider != "local" else [],
            }
        return out
