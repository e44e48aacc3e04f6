"""Just-in-time save from the surviving ranks when a node vanishes without notice (data-parallel jobs).

In data-parallel training every rank holds the whole model and optimizer, so the ranks that survive a lost node
still have everything a checkpoint needs except what is private to each rank: its RNG streams and its data
position. This module keeps a copy of every rank's private state on every rank, and saves from a survivor when a
collective fails because a peer is gone:

* Right before each optimizer step (torch's step pre-hook: the step's gradients are averaged, the update is
  about to be applied) every rank sends the others its RNG states and the state of the registered ``stateful``
  objects (one ``all_gather`` of some kilobytes a rank).
* ``step_done(k)`` keeps this rank's own state at the end of step k (local, no collective).
* When a collective then raises a peer-loss error (``burstd.train.collectives.is_peer_loss``), the model and
  optimizer are still those after step k (the failing collective came before the next optimizer step, which
  the step hooks check) and each rank's private state after step k is known: a checkpoint of step k is written
  (reason ``jit``), and the process exits with the requeue code. The resumed job redoes only the step that was
  in flight.

Which copy is saved for another rank: what is the same on every rank (an LR scheduler, a data position all
ranks share) is taken from this rank's end-of-step state; what differs between ranks (per-rank RNG streams, a
per-rank data position) from the copy that rank sent before its optimizer step, so it must not change after
the optimizer step within a step. Both hold for the usual loop (draw data and noise, forward, backward,
optimizer step, scheduler step).

Who writes: on every surviving node, the first rank to notice the loss (a lock file in the node's temp folder),
into its own staging folder renamed to ``step-N`` (the first rename wins, the others discard theirs). The first
to notice, because a rank blocked on a live peer only learns of the loss when the collective times out. The
other survivors wait for the checkpoint before they exit, so torchrun does not stop the writer on their account.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import logging
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from burstd.train.checkpoint import CheckpointManager, fault_point, rng_state
from burstd.train.collectives import checkpoint_timeout, is_peer_loss
from burstd.train.store import step_dir_name

log = logging.getLogger("burstd.train")


def same_state(a: Any, b: Any) -> bool:
    """Structural equality for state dicts: tensors by value (dtype and shape too), containers item by item."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):  # NumPy arrays
        import numpy as np

        return bool(np.array_equal(a, b))
    return bool(a == b)


def extras_for_ranks(replicas: Sequence[Mapping[str, Any]], own: Mapping[str, Any], me: int,
                     step: int) -> list[dict[str, Any]]:
    """Every rank's ``extra-rank<r>.pt`` content for a checkpoint of ``step``, written by rank ``me``.

    ``replicas[r]``: rank r's ``{"rng", "stateful"}`` sent before its optimizer step; ``own``: this rank's at
    the end of the step. A part equal on every rank comes from ``own``; a part that differs, from each rank's
    replica (this rank's own part always from ``own``)."""
    if not 0 <= me < len(replicas):
        raise ValueError(f"rank {me} is not one of the {len(replicas)} ranks replicated")
    rng_shared = all(same_state(replicas[0]["rng"], r["rng"]) for r in replicas)
    shared = {name: all(same_state(replicas[0]["stateful"].get(name), r["stateful"].get(name)) for r in replicas)
              for name in own["stateful"]}
    out = []
    for rank, replica in enumerate(replicas):
        if rank == me:
            out.append({"step": step, "rng": own["rng"], "stateful": dict(own["stateful"])})
            continue
        out.append({
            "step": step,
            "rng": own["rng"] if rng_shared else replica["rng"],
            "stateful": {name: own["stateful"][name] if shared[name] else replica["stateful"][name]
                         for name in own["stateful"]},
        })
    return out


def node_lock_path(store_root: str, step: int, env: Mapping[str, str]) -> str:
    """A lock file all ranks of this run on this node agree on (one writer a node), in the node's temp folder."""
    key = "|".join([store_root, str(step), env.get("SLURM_JOB_ID", ""), env.get("SLURM_RESTART_COUNT", ""),
                    env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""), env.get("TORCHELASTIC_RESTART_COUNT", "")])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"burstd-jit-{os.getuid()}-{digest}.lock")


def take_node_lock(path: str) -> bool:
    """True for the first process of the node to ask (it keeps the lock until it exits), False for the rest."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    return True  # the descriptor stays open: the lock lasts as long as this process


class SurvivorSave:
    """Replicates each rank's private state every step and saves from a survivor on a peer loss."""

    def __init__(self, manager: CheckpointManager, optimizers: Sequence[torch.optim.Optimizer], exit_code: int):
        if not optimizers:
            raise ValueError("a just-in-time save needs the optimizer (its step hooks mark the step boundary)")
        self.manager = manager
        self.exit_code = exit_code
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.writer = False  # this process writes the survivors' checkpoint for its node
        self.completed = 0  # the last step passed to step_done (or resumed from)
        self.own: dict[str, Any] | None = None  # this rank's private state at the end of ``completed``
        self.replicas: list[bytes] | None = None  # every rank's (pickled), sent before its optimizer step
        self._capacity = 0  # bytes a rank may send in one exchange; grows with the largest state seen
        self.replicas_end = -1  # the step the replicas are the end of
        self.optimizer_steps = 0  # optimizer steps since step_done: > 0 means the model is past ``completed``
        self.saved: int | None = None  # the step a survivor's checkpoint holds, once written or found
        self._handles = [optimizers[0].register_step_pre_hook(self._before_optimizer_step)]
        self._handles += [o.register_step_post_hook(self._after_optimizer_step) for o in optimizers]

    def _private_state(self) -> dict[str, Any]:
        return {"rng": rng_state(), "stateful": {n: o.state_dict() for n, o in self.manager.stateful.items()}}

    def _before_optimizer_step(self, *_: Any) -> None:
        fault_point("gather", self.completed + 1)
        self.replicas, self.replicas_end = self._exchange(pickle.dumps(self._private_state())), self.completed + 1

    def _exchange(self, mine: bytes) -> list[bytes]:
        """Every rank's bytes, in one all_gather of a fixed-size buffer (a length header, then the bytes): a
        second round, larger, only in the step some rank's state outgrew it (every rank sees every length, so
        all agree). Kept as bytes: unpickled only for a save."""
        while True:
            capacity = self._capacity
            buf = torch.zeros(8 + capacity, dtype=torch.uint8)
            buf[:8] = torch.frombuffer(bytearray(len(mine).to_bytes(8, "little")), dtype=torch.uint8)
            if len(mine) <= capacity:
                buf[8:8 + len(mine)] = torch.frombuffer(bytearray(mine), dtype=torch.uint8)
            out = [torch.empty_like(buf) for _ in range(self.world)]
            dist.all_gather(out, buf)
            sizes = [int.from_bytes(o[:8].numpy().tobytes(), "little") for o in out]
            if max(sizes) <= capacity:
                return [o[8:8 + n].numpy().tobytes() for o, n in zip(out, sizes)]
            self._capacity = max(sizes) + max(sizes) // 4 + 1024

    def _after_optimizer_step(self, *_: Any) -> None:
        self.optimizer_steps += 1

    def started(self, step: int) -> None:
        """The run starts at ``step`` (resumed, or 0): a checkpoint of it exists or nothing is lost."""
        self.completed, self.optimizer_steps = step, 0
        self.own = copy.deepcopy(self._private_state())

    def step_done(self, step: int) -> None:
        fault_point("step-done", step)
        self.completed, self.optimizer_steps = step, 0
        self.own = copy.deepcopy(self._private_state())

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    # ---- on a peer loss ------------------------------------------------------------------------------------
    def why_not(self) -> str | None:
        """Why no consistent checkpoint of ``completed`` can be made from here, or None when it can."""
        if self.optimizer_steps:
            return (f"the optimizer had stepped past step {self.completed} before the failing collective "
                    f"(a collective between optimizer.step() and step_done())")
        if self.replicas_end != self.completed:
            return f"the ranks' private states of step {self.completed} were never exchanged"
        return None

    def on_peer_loss(self, exc: BaseException) -> int | None:
        """The exit code after saving (or finding) the checkpoint of the last completed step; None when ``exc``
        is not a peer loss or no consistent save is possible (the caller re-raises ``exc``)."""
        if not is_peer_loss(exc):
            return None
        started = time.monotonic()
        step = self.completed
        first_line = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if self._complete(step) or step == 0:
            self._say(f"lost a peer rank after step {step} ({first_line}); "
                      f"{'nothing to save' if step == 0 else 'its checkpoint is already complete'}")
            self.saved = step
            return self.exit_code
        why = self.why_not()
        if why is not None:
            log.error("lost a peer rank after step %d, but no just-in-time save: %s. The job resumes from its "
                      "last periodic checkpoint.", step, why)
            return None
        assert self.replicas is not None and self.own is not None
        self.writer = take_node_lock(node_lock_path(self.manager.store.root, step, os.environ))
        if self.writer:
            # the ranks of this job sent these, over its own process group: trusted as torch's all_gather_object does
            extras = extras_for_ranks([pickle.loads(r) for r in self.replicas], self.own, self.rank, step)
            landed = self.manager.save_survivor_copy(step, extras, tag=f"r{self.rank}")
            verb = "saved" if landed else "another survivor saved"
        else:
            verb = "another survivor saved" if self._wait_for(step) else "no survivor saved"
        self.saved = step if self._complete(step) else None
        self._say(f"lost a peer rank after step {step} ({first_line}); {verb} step {step} just in time "
                  f"({time.monotonic() - started:.2f} s); exiting with code {self.exit_code} for requeue")
        return self.exit_code

    def _complete(self, step: int) -> bool:
        return step > 0 and self.manager.store.read_manifest(step_dir_name(step)) is not None

    def _wait_for(self, step: int) -> bool:
        deadline = time.monotonic() + checkpoint_timeout().total_seconds()
        while time.monotonic() < deadline:
            if self._complete(step):
                return True
            time.sleep(0.1)
        return False

    def _say(self, text: str) -> None:
        # one line per survivor that writes; the waiting ones only log
        if self.writer:
            print(f"burstd.train: rank {self.rank}: {text}", file=sys.stderr, flush=True)
        else:
            log.info("%s", text)
