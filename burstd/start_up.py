"""A process's start without the cyclic garbage collector's passes over what it imports.

A start imports tens of thousands of functions and classes (torch and its checkpointing, the Compute Engine
client's thousand message classes, FastAPI, SQLAlchemy), and all of them live as long as the process. Python's
collector runs a pass every 700 net allocations and a full pass whenever the heap grew by a quarter, so a start
pays for dozens of passes over an ever larger heap that free next to nothing: a daemon's imports leave 700
unreachable objects among 400,000, a training rank's 8,000 among 700,000. Paused, those imports cost about a
fifth less CPU in the daemon and a sixth less in a rank (docs/testbed.md, round thirteen); an HA takeover, a
restart under systemd and a job's resume after a preemption all wait on such a start.

When the start is over, ``gc.freeze()`` moves everything it made into the permanent generation, out of the
collector's sight: it lives as long as the process anyway (the few cycles of start-up garbage stay, a one-time
few hundred kilobytes), so the running process's full passes skip it too. The collector is then back on for what
the process does next.

    start_up.pause()      # first thing in an entry point
    ...                   # imports, configuration, wiring
    start_up.done()       # before the work the process exists for

or ``with start_up.paused(): ...`` where the start is one block. A leaf module: it imports nothing of burstd.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False


def pause() -> None:
    """No collector passes until :func:`done`; nothing to do where the collector is off already (then
    :func:`done` leaves it off too, as its owner wants it)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def done() -> None:
    """The start is over: freeze what it made and turn the collector back on. Only undoes :func:`pause`, so it
    can be called on every path out of a start, once or more, paused or not."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


@contextmanager
def paused() -> Iterator[None]:
    """:func:`pause` for the block, :func:`done` on the way out, however it is left."""
    pause()
    try:
        yield
    finally:
        done()
