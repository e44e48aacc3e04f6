"""Wiring: APScheduler runs the reconcile cycle every ``daemon.cycle_interval_s``; ``wake()`` runs it now.

Wakes coalesce: a wake while a cycle runs makes exactly one more cycle run right after it, however
many wakes arrive (hook storms cost one extra cycle, never a queue of them).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

from apscheduler.schedulers.background import BackgroundScheduler

from burstd.daemon.cycle_errors import step_failed
from burstd.daemon.logging import get_logger
from burstd.daemon.reconcile import Reconciler

log = get_logger("service")
JOB_ID = "reconcile"


class LoopService:
    def __init__(self, reconciler: Reconciler, interval_s: float, on_cycle=None):
        self.reconciler = reconciler
        self.interval_s = interval_s
        self.on_cycle = on_cycle  # e.g. the systemd watchdog ping
        self._lock = threading.Lock()
        self._running = False
        self._dirty = False
        self.cycles = 0
        self.scheduler = BackgroundScheduler(
            timezone=timezone.utc,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        reconciler.on_wake = self.wake

    def start(self) -> None:
        self.scheduler.add_job(self._run, "interval", seconds=self.interval_s, id=JOB_ID,
                               next_run_time=datetime.now(timezone.utc))
        self.scheduler.start()

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def wake(self) -> None:
        with self._lock:
            self._dirty = True
            if self._running:
                return  # the running cycle sees _dirty and goes round once more
        try:
            self.scheduler.modify_job(JOB_ID, next_run_time=datetime.now(timezone.utc))
        except Exception:  # noqa: BLE001 - not started yet / shutting down: the interval will run it
            pass

    def _run(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        try:
            while True:
                with self._lock:
                    self._dirty = False
                t0 = time.monotonic()
                try:
                    self.reconciler.cycle()
                except Exception as exc:  # noqa: BLE001 - the loop must survive anything
                    step_failed(log, "cycle crashed", exc, self.reconciler.metrics)
                self.cycles += 1
                if self.on_cycle:
                    self.on_cycle()
                with self._lock:
                    if not self._dirty:
                        self._running = False
                        return
                # a wake during the cycle: go again, but never spin faster than 20 Hz
                time.sleep(max(0.0, 0.05 - (time.monotonic() - t0)))
        except BaseException:
            with self._lock:
                self._running = False
            raise
