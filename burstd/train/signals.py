"""Preemption-signal handling for training processes.

The handlers only record that a signal arrived (an attribute store: async-signal-safe in the Python sense); the
training loop polls :attr:`PreemptionFlag.requested` at step boundaries, where all ranks agree on when to stop.
This module does not import torch.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TypeAlias

#: Exit code of a process that saved a checkpoint because it was told to stop and wants to be requeued.
#: Override with the ``BURSTD_REQUEUE_EXIT_CODE`` environment variable.
DEFAULT_REQUEUE_EXIT_CODE = 85

#: Signal the node agent (or ``sbatch --signal``) delivers ahead of a preemption.
DEFAULT_PREEMPT_SIGNAL = "SIGUSR1"

#: A signal's handler as ``signal.getsignal`` returns it and ``signal.signal`` takes it back: a function,
#: ``SIG_DFL``/``SIG_IGN`` (or their numbers), or None for one not installed from Python.
SignalHandler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def requeue_exit_code() -> int:
    raw = os.environ.get("BURSTD_REQUEUE_EXIT_CODE", str(DEFAULT_REQUEUE_EXIT_CODE))
    try:
        code = int(raw)
    except ValueError:
        raise ValueError(f"BURSTD_REQUEUE_EXIT_CODE must be an integer 1..255, got {raw!r}") from None
    if not 1 <= code <= 255:
        raise ValueError(f"BURSTD_REQUEUE_EXIT_CODE must be an integer 1..255, got {code}")
    return code


def parse_signal(name: str | int | signal.Signals) -> signal.Signals:
    """``"SIGUSR1"``, ``"USR1"``, ``"usr1"`` or ``10`` -> ``signal.SIGUSR1``; clear error otherwise."""
    if isinstance(name, signal.Signals):
        return name
    if isinstance(name, int) or (isinstance(name, str) and name.strip().isdigit()):
        try:
            return signal.Signals(int(name))
        except ValueError:
            raise ValueError(f"unknown signal number {name!r}") from None
    text = str(name).strip().upper()
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return signal.Signals[text]
    except KeyError:
        raise ValueError(f"unknown signal name {name!r} (expected e.g. SIGUSR1, SIGUSR2, SIGTERM)") from None


def preempt_signal_from_env() -> signal.Signals:
    return parse_signal(os.environ.get("BURSTD_PREEMPT_SIGNAL", DEFAULT_PREEMPT_SIGNAL))


@dataclass
class PreemptionFlag:
    """Set by the signal handlers; read by the training loop."""

    requested: bool = False
    signum: int | None = None
    received_at: float | None = None  # time.time() of the first signal
    _previous: dict[int, SignalHandler] = field(default_factory=dict, repr=False)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        # Only plain attribute stores: nothing that allocates locks, logs, or does I/O.
        if not self.requested:
            self.signum = signum
            self.received_at = time.time()
        self.requested = True

    def uninstall(self) -> None:
        """Restore the handlers that were in place before :func:`install_handlers`."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def install_handlers(
    signals: tuple[str | int | signal.Signals, ...] | None = None,
    flag: PreemptionFlag | None = None,
) -> PreemptionFlag:
    """Install flag-setting handlers for the preemption signal (default from ``BURSTD_PREEMPT_SIGNAL``, else
    SIGUSR1) and SIGTERM. Must be called from the main thread. System calls interrupted by these signals are
    restarted (``siginterrupt(False)``) so a signal landing during a collective does not surface as EINTR."""
    flag = flag or PreemptionFlag()
    wanted = [parse_signal(s) for s in signals] if signals else [preempt_signal_from_env(), signal.SIGTERM]
    for sig in dict.fromkeys(wanted):
        flag._previous.setdefault(int(sig), signal.getsignal(sig))
        signal.signal(sig, flag._handler)
        signal.siginterrupt(sig, False)
    return flag
