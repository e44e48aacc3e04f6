"""torchrun, quiet about a preemption: ``python -m burstd.train.launch`` takes torchrun's arguments.

    python -m burstd.train.launch --nnodes=1 --nproc-per-node=2 ... -m burstd.train.example --steps 100 ...

It is torchrun itself (``torch.distributed.run.main``, in this process) with one difference. When the workers
stop for a preemption, checkpointed, with the requeue code (85), torchrun calls it a failure: a ``ChildFailedError``
traceback and a failure table, some 30 lines of the job's output for an event that went as planned. Here that
ends quietly with the requeue code, and torchrun's own stop on the preemption signal (``SignalException``, after
the workers had their ``--shutdown-timeout`` to save) quietly with 128 + the signal; the sbatch templates then
print the one line a researcher needs ("preempted on cloud2 at step 412, checkpoint saved, requeued"). Any other
failure reads exactly as torchrun's.

A preemption signal that comes before torchrun starts the workers (while it imports torch, parses its arguments
or waits for its rendezvous: seconds) would kill a plain torchrun, and the job would fail where it should be
requeued. burstd-agent sends it then, to the job's leaf processes, when a notice meets a job that has just
started. Here it ends the launch at once with the requeue code: there is nothing to save yet, and the job
script requeues the job.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from burstd import start_up
from burstd.train.signals import parse_signal, preempt_signal_from_env, requeue_exit_code

#: torchrun's loggers that narrate a worker's exit and its own shutdown
ELASTIC_LOGGERS = ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api")


class _PlannedStopFilter(logging.Filter):
    """Drops torchrun's log lines about the requeue exit code and the preemption signal. Holds back its lines
    about stopping the other workers (SIGTERM), which a planned stop also causes: :meth:`release` logs them
    after all when the stop turns out to be a failure."""

    def __init__(self, code: int, sig: signal.Signals):
        super().__init__()
        self.pattern = re.compile(
            rf"failed \(exitcode: {code}\)|Received ({int(sig)}|{sig.name}|Signals\.{sig.name}) death signal"
            rf"|closing signal ({sig.name}|{int(sig)})\b"
        )
        self.hold = re.compile(r"closing signal (SIGTERM|15)\b")
        self.held: list[logging.LogRecord] = []
        self._releasing = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self._releasing:
            return True
        message = record.getMessage()
        if self.hold.search(message):
            self.held.append(record)
            return False
        return not self.pattern.search(message)

    def release(self) -> None:
        """Log the held lines after all (the stop was not a preemption)."""
        self._releasing = True
        try:
            for record in self.held:
                logging.getLogger(record.name).handle(record)
        finally:
            self.held.clear()
            self._releasing = False


def planned_stop(exitcodes: list[int], code: int) -> bool:
    """The workers' exit codes (first failure first) say: they stopped for a preemption. The first to exit chose
    the requeue code; the others did too, or were stopped by torchrun on its way out (a signal, < 0)."""
    return bool(exitcodes) and exitcodes[0] == code and all(c == code or c < 0 for c in exitcodes[1:])


class _PreemptedBeforeWorkers(BaseException):
    """The preemption signal, raised in the launcher before torch is imported (torch's own kind is raised after)."""


class _BeforeWorkers:
    """The preemption signal's handler until torchrun starts the workers, when torch puts its own in place (which
    forwards the signal to them). It raises, so that whatever the launcher is doing ends; :attr:`raised` tells
    that stop from one torch's handler made.

    Python runs a handler only between bytecodes, and a multi-node rendezvous waits inside torch's C++ store for
    as long as the other nodes take (up to its timeout). So the signal also wakes a watcher thread (through
    ``signal.set_wakeup_fd``): if the handler has not run ``GRACE_S`` later while it is still the one in place,
    the watcher ends the process itself, with the requeue code. Nothing runs yet that it could leave behind."""

    GRACE_S = 1.0

    def __init__(self, sig: signal.Signals, code: int):
        self.sig, self.code = sig, code
        self.raised = False
        self.make: Callable[[], BaseException] = lambda: _PreemptedBeforeWorkers(sig)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="burstd-before-workers", daemon=True).start()
        signal.signal(sig, self)  # last: from here on the signal raises (the caller is ready for that)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.raised = True
        raise self.make()

    def _in_place(self) -> bool:
        return signal.getsignal(self.sig) is self  # else torch has started the workers and handles the signal

    def _watch(self, read_fd: int) -> None:
        while True:
            woken = os.read(read_fd, 64)  # the numbers of the signals that came (any with a Python handler)
            if int(self.sig) not in woken or not self._in_place():
                continue
            time.sleep(self.GRACE_S)
            if not self.raised and self._in_place():
                _stopped_before_workers(self.code, self.sig, " (in the rendezvous)")
                os._exit(self.code)


def _stopped_before_workers(code: int, sig: signal.Signals, where: str = "") -> int:
    print(f"torchrun: {sig.name} before the workers started{where}: nothing to save, exiting with the requeue code "
          f"{code}", file=sys.stderr, flush=True)
    return code


#: torchrun's --signals-to-handle when it is not given
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def torchrun_handles(args: list[str], sig: signal.Signals) -> bool:
    """Whether torchrun, run with ``args``, puts its own handler on ``sig`` when it starts the workers (only then
    may the early handler stand in for it until that moment, as it would otherwise stay for the whole run)."""
    names = TORCHRUN_SIGNALS
    for i, arg in enumerate(args):
        if arg in ("-m", "--module"):
            break  # the training module and its own arguments follow
        flag, eq, value = arg.partition("=")
        if flag in ("--signals-to-handle", "--signals_to_handle"):
            names = value if eq else (args[i + 1] if i + 1 < len(args) else "")
    for name in names.split(","):
        try:
            if parse_signal(name) == sig:
                return True
        except ValueError:
            continue  # torchrun warns of a name it cannot handle, and handles the others
    return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    code, sig = requeue_exit_code(), preempt_signal_from_env()
    early = None
    try:
        if torchrun_handles(args, sig):
            early = _BeforeWorkers(sig, code)
        with start_up.paused():  # importing torch, without the collector's passes over it (burstd.start_up)
            from torch.distributed.elastic.multiprocessing.api import SignalException
            from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
            from torch.distributed.run import main as torchrun
    except _PreemptedBeforeWorkers:
        return _stopped_before_workers(code, sig)
    if early is not None:  # torch's kind from here on: torchrun stops as for its own handler (and leaves an
        # elastic c10d rendezvous open for the requeued run)
        early.make = lambda: SignalException(f"Process {os.getpid()} got signal: {sig}", sigval=sig)

    quiet = _PlannedStopFilter(code, sig)
    for name in ELASTIC_LOGGERS:
        logging.getLogger(name).addFilter(quiet)
    try:
        torchrun(args)
    except ChildFailedError as exc:
        first_rank, _ = exc.get_first_failure()
        ordered = [exc.failures[first_rank]] + [f for r, f in exc.failures.items() if r != first_rank]
        if planned_stop([f.exitcode for f in ordered], code):
            return code
        quiet.release()
        raise
    except SignalException as exc:
        if early is not None and early.raised:
            return _stopped_before_workers(code, sig)
        # the workers were forwarded the signal and had --shutdown-timeout to save: whether they did, the job
        # script asks the checkpoint folder (python -m burstd.train should-requeue)
        if exc.sigval != sig:
            quiet.release()
            print(f"torchrun: stopped by {signal.Signals(exc.sigval).name}", file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
