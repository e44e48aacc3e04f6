"""The launches of one batch of actions, run at once: a bounded pool of worker threads (``daemon.launch_workers``).

    pool = LaunchPool(width=8)
    try:
        pool.submit({"lease-1", "cloud1"}, launch_one)   # on a worker; returns at once (unless a key is busy)
        pool.wait_for({"lease-1"})                        # before another action on lease-1: its launch is over
    finally:
        pool.close()                                      # waits for every launch; re-raises a ``Fenced`` one met

A resume storm of 500 nodes is 500 provider calls, each a network round trip or several; one after another they
take minutes. The pool keeps what the Executor promises one at a time (docs/ha.md, "Launch storms"):

* **bounded**: at most ``width`` launches in flight;
* **ordered per lease and node**: a launch claims keys (its leases' ids and nodes); a launch or any other action
  on a key in flight waits for that launch first, so a lease's moves stay in order and a node never has two
  launches at once. The caller (one thread, the cycle) is the only one that submits and waits;
* **isolated**: each launch reports its own failure (the Executor logs and counts it); one failing launch
  changes nothing for the others;
* **fenced**: a launch refused by the fence (``Fenced``: this daemon was deposed) stops the pool: queued
  launches do not start, and ``close`` / ``raise_if_fenced`` re-raise it on the caller's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from burstd.domain.leadership import Fenced


class LaunchPool:
    def __init__(self, width: int):
        if width < 1:
            raise ValueError(f"a launch pool needs at least one worker, got {width}")
        self.width = width
        self._executor: ThreadPoolExecutor | None = None  # started on the first launch
        self._in_flight: dict[str, Future] = {}  # key -> the launch that claimed it last
        self._futures: list[Future] = []
        self._fenced: Fenced | None = None
        self._lock = threading.Lock()

    def submit(self, keys: Iterable[str], fn: Callable[[], None]) -> None:
        """Run ``fn`` on a worker once every launch holding one of ``keys`` has finished."""
        keys = set(keys)
        self.wait_for(keys)
        self.raise_if_fenced()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.width, thread_name_prefix="burstd-launch")
        future = self._executor.submit(self._guarded, fn)
        self._futures.append(future)
        for key in keys:
            self._in_flight[key] = future

    def _guarded(self, fn: Callable[[], None]) -> None:
        if self._fenced is not None:
            return  # deposed while this launch waited in the queue: it never starts
        try:
            fn()
        except Fenced as exc:
            with self._lock:
                if self._fenced is None:
                    self._fenced = exc

    def wait_for(self, keys: Iterable[str] | None) -> None:
        """Block until the launches holding ``keys`` are over (None: every launch in flight)."""
        if keys is None:
            wait(self._futures)
            return
        busy = {self._in_flight[k] for k in keys if k in self._in_flight}
        if busy:
            wait(busy)

    def busy(self, keys: Iterable[str]) -> bool:
        """Whether a launch holding one of ``keys`` is still running."""
        return any(k in self._in_flight and not self._in_flight[k].done() for k in keys)

    def raise_if_fenced(self) -> None:
        if self._fenced is not None:
            raise self._fenced

    def close(self) -> None:
        """Wait for every launch, stop the workers, and re-raise what a launch could not handle itself."""
        try:
            wait(self._futures)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
            self._in_flight.clear()
        self.raise_if_fenced()
        for future in self._futures:
            exc = future.exception()
            if exc is not None:  # ``fn`` reports its own errors: whatever escapes it is a bug, shown as such
                raise exc
