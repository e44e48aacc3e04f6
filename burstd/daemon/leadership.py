"""Active/standby: this daemon's side of the leader election (the row and the fence live in ``burstd.db.leadership``).

    lead = Elector(store, holder_id(config), lease_s=15)
    lead.tick()             # every ha.renew_interval_s (a thread in ``burstd``; tests call it by hand)
    lead.fence              # Fence(holder, epoch) while this daemon leads, else None (a standby)

The cycle acts only while ``fence`` is set, and hands the fence to the Executor, which writes every cloud intent
under it. A claim that cannot reach the database, or a fenced write that is refused (``Fenced``), drops the
fence at once: a daemon that cannot prove it leads does not act. The standby keeps serving the API and storing
hook and agent requests; they are rows the leader acts on, whichever daemon took them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from burstd.daemon.logging import ev, get_logger
from burstd.domain.leadership import Fence, LeaderRecord

log = get_logger("leadership")


def holder_id(node_id: str | None = None) -> str:
    """This process's name in the election: host, pid and a random suffix, so a restarted daemon is a new holder
    (and wins a new epoch) even with the same pid."""
    host = node_id or socket.gethostname().split(".")[0]
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Elector:
    def __init__(self, store: Any, holder: str, *, lease_s: float, on_elected: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] | None = None):
        self.store = store
        self.holder = holder
        self.lease_s = lease_s
        self.on_elected = on_elected  # wake the loop: the new leader acts at once
        self._clock = clock  # tests: a fake clock passed to the store; None = the database's clock
        self._lock = threading.Lock()
        self._fence: Fence | None = None
        self._renewed = 0.0  # time.monotonic() of the last successful claim
        self.last: LeaderRecord | None = None  # the row as of the last claim
        self.last_error: str = ""

    @property
    def fence(self) -> Fence | None:
        """The fence while this daemon leads; None once its last renewal is older than the lease (it may have
        been taken over without knowing it yet: do not act on a lead you cannot prove)."""
        if self._fence is not None and self._clock is None and time.monotonic() - self._renewed > self.lease_s:
            return None
        return self._fence

    @property
    def is_leader(self) -> bool:
        return self.fence is not None

    def tick(self) -> Fence | None:
        """Claim or renew the lead once. Returns the fence while leading, else None."""
        try:
            rec = self.store.claim_leadership(self.holder, self.lease_s,
                                              now=None if self._clock is None else self._clock())
        except Exception as exc:  # noqa: BLE001 - no database, no lead: stop acting until a claim succeeds
            self.last_error = f"{type(exc).__name__}: {exc}"
            if self._fence is not None:
                log.error("lost the database: acting stops", extra=ev(holder=self.holder, epoch=self._fence.epoch,
                                                                      error=str(exc)[:300]))
            self._set(None)
            return None
        self.last_error = ""
        self.last = rec
        self._renewed = time.monotonic()
        self._set(rec.fence if rec.holder == self.holder else None)
        return self._fence

    def deposed(self, why: str) -> None:
        """A fenced write was refused: another daemon leads now."""
        if self._fence is not None:
            log.error("deposed: acting stops", extra=ev(holder=self.holder, epoch=self._fence.epoch, reason=why))
        self._set(None)

    def resign(self) -> None:
        """Hand the lead over at once (a clean stop)."""
        self._set(None)
        try:
            self.store.resign_leadership(self.holder)
        except Exception as exc:  # noqa: BLE001 - the lease runs out by itself
            log.warning("could not resign the lead", extra=ev(error=str(exc)[:300]))

    def _set(self, fence: Fence | None) -> None:
        with self._lock:
            old, self._fence = self._fence, fence
        if fence is not None and (old is None or old.epoch != fence.epoch):
            rec = self.last
            log.warning("elected leader", extra=ev(holder=self.holder, epoch=fence.epoch,
                                                   previous=None if rec is None else rec.holder))
            self.on_elected()
        elif fence is None and old is not None:
            log.warning("now standby", extra=ev(holder=self.holder,
                                                leader=None if self.last is None else self.last.holder))

    def status(self) -> dict:
        """For ``/v1/status``: this daemon's role and who leads since when."""
        rec = self.last
        try:
            rec = self.store.leader()
        except Exception as exc:  # noqa: BLE001 - status answers even without the database
            self.last_error = f"{type(exc).__name__}: {exc}"
        return {
            "self": self.holder, "role": "leader" if self.is_leader else "standby", "lease_s": self.lease_s,
            "leader": None if rec is None else rec.holder, "epoch": None if rec is None else rec.epoch,
            "since": None if rec is None else rec.since, "expires_at": None if rec is None else rec.expires_at,
            "error": self.last_error or None,
        }

    def run(self, stop: threading.Event, interval_s: float) -> threading.Thread:
        """Claim/renew every ``interval_s`` in a daemon thread until ``stop`` is set."""
        def loop() -> None:
            while True:
                t0 = time.monotonic()
                self.tick()
                if stop.wait(max(0.0, interval_s - (time.monotonic() - t0))):
                    return

        th = threading.Thread(target=loop, name="burstd-leadership", daemon=True)
        th.start()
        return th
