"""The few lines a training loop adds to survive preemption.

    job = Preemptible(ckpt_dir, model, optimizer, stateful={"sched": scheduler, "data": loader_state}, every=100)
    for step in range(job.resume(), total_steps):
        train_one_step(step)
        job.step_done(step + 1)   # periodic save; on a preemption signal: save, exit for requeue
    job.finish()

Data-parallel on two or more nodes, the loop also runs inside ``with job:``: a node lost without notice then
costs at most the step in flight (a survivor saves, ``burstd.train.survivor``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.distributed as dist

from burstd.train.checkpoint import CheckpointManager
from burstd.train.collectives import checkpoint_timeout
from burstd.train.interval import RATE_ENV, Interval, choose_interval, rate_from_env
from burstd.train.progress import ProgressReporter
from burstd.train.signals import PreemptionFlag, install_handlers, requeue_exit_code
from burstd.train.survivor import SurvivorSave

log = logging.getLogger("burstd.train")


class Preemptible:
    """Signal handlers + stop-step agreement + periodic/preemption checkpoints around a :class:`CheckpointManager`.

    ``sync_every``: ranks agree on whether to stop every ``sync_every`` steps with one all-reduce (MAX) of a
    one-element int64 tensor on the default process group. 1 (default) loses no step; k > 1 saves k-1 tiny
    collectives out of k at the price of stopping up to k-1 steps after the signal (the work is not lost: it is
    in the checkpoint, but the notice window must cover those steps too).

    ``every``: periodic checkpoints every that many steps (0: only on a preemption signal). Left out (None), the
    interval is chosen for the job: with ``BURSTD_PREEMPT_RATE_PER_HOUR`` (the pool's preemptions per node-hour)
    set, the first step after start is checkpointed to measure the save's cost, the next one times a step, and
    Young/Daly picks the interval (``burstd.train.interval``), printed once on rank 0 and kept in
    :attr:`interval`; without it, 0.

    ``jit``: save from the surviving ranks when a peer is lost without notice (``burstd.train.survivor``; the
    training loop runs inside ``with job:``, which catches the failing collective). Left out (None): on when the
    job is distributed over more than one rank and an optimizer is given. It costs one small ``all_gather`` a
    step (each rank's RNG and ``stateful`` state, before the optimizer step).

    ``steps_per_epoch``: told to burstd with the progress reports (``burstd.train.progress``: rank 0 reports
    where ``BURSTD_PROGRESS_URL`` is set), so it can show the cost of an epoch as well as of a step.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | list[torch.optim.Optimizer] | None = None,
        *,
        stateful: Mapping[str, Any] | None = None,
        every: int | None = None,
        keep: int = 3,
        async_save: bool = False,
        sync_every: int = 1,
        signals: tuple[str | int | signal.Signals, ...] | None = None,
        exit_code: int | None = None,
        flag: PreemptionFlag | None = None,
        steps_per_epoch: int | None = None,
        jit: bool | None = None,
    ):
        if (every is not None and every < 0) or sync_every < 1:
            raise ValueError(f"every must be >= 0 and sync_every >= 1 (got every={every}, sync_every={sync_every})")
        rate = rate_from_env() if every is None else None
        self.exit_code = requeue_exit_code() if exit_code is None else exit_code
        # ``flag``: handlers installed earlier (at the top of the script, before slow imports); they may have fired.
        self.flag: PreemptionFlag = flag if flag is not None else install_handlers(signals)
        self.manager = CheckpointManager(location, model, optimizer, stateful=stateful, keep=keep,
                                         async_save=async_save,
                                         timeout=checkpoint_timeout() if dist.is_initialized() else None)
        self.every = every or 0
        self.sync_every = sync_every
        self.distributed = dist.is_available() and dist.is_initialized()
        self.stopped_at: int | None = None
        self.interval: Interval | None = None
        # the automatic interval: (rate, the measured save cost, when the step after it began)
        self._rate = rate or None
        self._save_cost_s: float | None = None
        self._after_save: float | None = None
        # rank 0 tells burstd its steps, step time and GPU use where BURSTD_PROGRESS_URL is set (train.progress)
        rank0 = not self.distributed or dist.get_rank() == 0
        self.progress = ProgressReporter.from_env(steps_per_epoch=steps_per_epoch) if rank0 else None
        optimizers = self.manager._model_optim.optimizers
        if jit is None:
            jit = self.distributed and dist.get_world_size() > 1 and bool(optimizers)
        if jit and not self.distributed:
            raise ValueError("jit=True needs torch.distributed initialised (a survivor saves for the lost ranks)")
        self.survivor = SurvivorSave(self.manager, optimizers, self.exit_code) if jit else None

    def __enter__(self) -> Preemptible:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        """A collective that failed because a peer is gone: save from here, exit with the requeue code.

        The exit skips Python's teardown (``os._exit``, after the streams and the log are flushed): the process
        group is broken, and destroying it aborted the survivor now and then once its checkpoint was already
        complete ("terminate called without an active exception" from gloo's threads, exit -6 instead of the
        requeue code; seen on the loaded 2-core machine)."""
        if exc is None or self.survivor is None or not isinstance(exc, Exception):
            return False
        code = self.survivor.on_peer_loss(exc)
        if code is None:
            return False
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)

    def resume(self) -> int:
        """Load the newest complete checkpoint; return the number of steps already done."""
        step = self.manager.resume()
        if self.survivor is not None:
            self.survivor.started(step)
        return step

    def should_stop(self, step: int) -> bool:
        """True on every rank when any rank has been signalled (checked every ``sync_every`` steps)."""
        if step % self.sync_every:
            return False
        local = 1 if self.flag.requested else 0
        if not self.distributed:
            return bool(local)
        t = torch.tensor([local], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def step_done(self, step: int) -> None:
        """Call after each completed step with the number of steps done. Saves every ``every`` steps; when a
        preemption signal arrived on any rank, saves (synchronously), and exits with the requeue code."""
        if self.survivor is not None:  # first: the step is complete here, whatever fails next
            self.survivor.step_done(step)
        if self.should_stop(step):
            self.stop(step)
        if self.progress is not None:
            self.progress.step_done(step)
        if self._rate is not None and self.interval is None:
            self._measure(step)
        elif self.every and step % self.every == 0:
            self.manager.save(step, reason="periodic")

    def _measure(self, step: int) -> None:
        """First call: a timed save (what each checkpoint will cost the loop). Second: the step it took; then
        Young/Daly. Every rank takes the largest of both figures, so all choose the same interval."""
        if self._save_cost_s is None:
            started = time.monotonic()
            self.manager.save(step, reason="periodic")
            self._after_save = time.monotonic()
            self._save_cost_s = self._after_save - started
            return
        assert self._after_save is not None and self._rate is not None
        measured = torch.tensor([self._save_cost_s, time.monotonic() - self._after_save], dtype=torch.float64)
        if self.distributed:
            dist.all_reduce(measured, op=dist.ReduceOp.MAX)
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1")
        self.interval = choose_interval(save_cost_s=float(measured[0]), step_s=max(float(measured[1]), 1e-6),
                                        preemptions_per_hour=self._rate, nodes=nodes)
        self.every = self.interval.steps
        if not self.distributed or dist.get_rank() == 0:
            print(f"burstd.train: {self.interval.why} ({RATE_ENV}={self._rate:g})", file=sys.stderr, flush=True)

    def stop(self, step: int) -> None:
        signame = signal.Signals(self.flag.signum).name if self.flag.signum else "a peer rank's signal"
        # one rank says it: the job's output gets one line per event, not one per process
        first = not self.distributed or dist.get_rank() == 0
        log.log(logging.WARNING if first else logging.DEBUG,
                "preemption (%s): checkpointing at step %d and exiting with code %d for requeue",
                signame, step, self.exit_code)
        self.manager.save(step, reason="preempt", block=True)  # waits for any background save first
        self.manager.wait()
        self.stopped_at = step
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(self.exit_code)

    def finish(self, step: int | None = None, *, save: bool = False) -> None:
        """End of training: wait for background saves; optionally write a final checkpoint."""
        if save and step is not None:
            self.manager.save(step, reason="final", block=True)
        self.manager.wait()
        if self.survivor is not None:
            self.survivor.close()
        if self.progress is not None:
            self.progress.close()
        self.flag.uninstall()
