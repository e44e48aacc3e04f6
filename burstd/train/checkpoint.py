"""Atomic, resumable checkpoints with torch.distributed.checkpoint (DCP).

``CheckpointManager`` saves, on every rank, a state made of:

* DCP state (``model`` and ``optim`` through ``torch.distributed.checkpoint.state_dict.get_state_dict``, so plain,
  DDP and FSDP models all work; replicated tensors are written once, sharded ones by their owners), and
* one small per-rank file ``extra-rank<r>.pt``: the step, RNG states (Python, NumPy, torch CPU, CUDA when present)
  and every registered stateful object (LR scheduler, data-loader position, ...).

Rank 0 then fsyncs, writes the manifest last and renames ``step-N.partial`` to ``step-N`` (see ``store.py``).
With ``async_save=True`` the DCP write runs in a background thread (``dcp.async_save``) on a dedicated gloo group;
the training stall is the in-memory staging copy.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import random
import socket
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from burstd.train.identity import job_identity, refuse_foreign
from burstd.train.store import (
    FORMAT_VERSION,
    MANIFEST,
    CheckpointDirError,
    CheckpointError,
    CheckpointInfo,
    CheckpointMismatchError,
    CheckpointStore,
    fsync_dir,
    manifest_bytes,
    step_dir_name,
)

log = logging.getLogger("burstd.train")

try:  # NumPy is optional
    import numpy as _np

    HAVE_NUMPY = True
except ImportError:  # pragma: no cover
    HAVE_NUMPY = False

# Single-process saves/loads (no torchrun) are intended; DCP warns about them on every call.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized",
                        category=UserWarning)


@contextlib.contextmanager
def _zip_crc_off() -> Iterator[None]:
    """torch.save computes a CRC32 of every record it writes, and DCP writes each tensor through torch.save; but DCP
    reads a tensor back by its byte range and never checks that CRC (a flipped byte loads silently either way).
    Computing it was about 40% of a blocking save's time (docs/preemption-storm.md), the seconds a preemption
    notice leaves. The setting is process-wide: off only around the saves training waits on (a blocking save, the
    preemption save among them, and a survivor's copy), never around an async save that runs beside the user's
    code. torch < 2.5 has no switch."""
    get = getattr(torch.serialization, "get_crc32_options", None)
    put = getattr(torch.serialization, "set_crc32_options", None)
    if get is None or put is None:
        yield
        return
    before = get()
    put(False)
    try:
        yield
    finally:
        put(before)


# test hook: "before-manifest@STEP" -> os._exit(137) on rank 0 there; "NAME@STEP@RANK": that rank only (the
# survivor tests kill one rank at an exact point of a step: "gather@6@2", "step-done@6@3")
FAULT_ENV = "BURSTD_TRAIN_FAULT"


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def fault_point(name: str, step: int) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    if spec and spec in (f"{name}@{step}", f"{name}@{step}@{_rank()}"):
        log.error("fault point %s reached at step %d: exiting without cleanup", name, step)
        os._exit(137)


class _ModelOptim(Stateful):
    """Model and optimizers as one DCP-stateful object (FQN-keyed, works for DDP/FSDP)."""

    def __init__(self, model: torch.nn.Module, optimizers: list[torch.optim.Optimizer]):
        self.model = model
        self.optimizers = optimizers

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizers or [])
        out: dict[str, Any] = {"model": model_sd}
        if self.optimizers:
            out["optim"] = optim_sd
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizers or [],
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict.get("optim", {}),
            options=StateDictOptions(strict=True),
        )


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if HAVE_NUMPY:  # as plain values and a tensor: loadable with torch.load(weights_only=True)
        legacy = _np.random.get_state(legacy=True)
        if not isinstance(legacy, tuple):  # pragma: no cover - legacy=True always answers the tuple
            raise TypeError(f"numpy's RNG state is not the legacy tuple: {type(legacy).__name__}")
        kind, keys, pos, has_gauss, cached = legacy
        state["numpy"] = (str(kind), torch.from_numpy(keys.astype(_np.int64)), int(pos), int(has_gauss),
                          float(cached))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if HAVE_NUMPY and "numpy" in state:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        _np.random.set_state((kind, _np.asarray(keys, dtype=_np.int64).astype(_np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def tensor_shapes(tree: Any, prefix: str = "") -> dict[str, list[int]]:
    """Flatten nested dicts/lists to ``{"model.fc.weight": [64, 32], ...}`` for the tensors in them."""
    out: dict[str, list[int]] = {}
    if isinstance(tree, torch.Tensor):
        out[prefix] = list(tree.shape)
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            out.update(tensor_shapes(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            out.update(tensor_shapes(value, f"{prefix}.{i}" if prefix else str(i)))
    return out


def describe_mismatch(saved: Mapping[str, list[int]], current: Mapping[str, list[int]], limit: int = 5) -> list[str]:
    problems: list[str] = []
    for key in sorted(set(saved) | set(current)):
        if key not in current:
            problems.append(f"{key} is in the checkpoint but not in this model")
        elif key not in saved:
            problems.append(f"{key} is in this model but not in the checkpoint")
        elif list(saved[key]) != list(current[key]):
            problems.append(f"{key} has shape {tuple(saved[key])} in the checkpoint but {tuple(current[key])} here")
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more differences"]
    return problems


def _manifest(step: int, reason: str, world: int, shapes: dict[str, list[int]]) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "step": step,
        "reason": reason,
        "world_size": world,
        "tensors": shapes,
        "written_at": None,
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT", "0"),
        "job": job_identity(os.environ),  # resume refuses another job's checkpoint (identity.py)
        "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "torch": torch.__version__,
    }


class CheckpointManager:
    """Save and restore training state; see the module docstring.

    ``stateful`` maps names to objects with ``state_dict()``/``load_state_dict()`` (LR scheduler, data loader
    position, anything small and per-rank).
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | list[torch.optim.Optimizer] | None = None,
        *,
        stateful: Mapping[str, Any] | None = None,
        keep: int = 3,
        async_save: bool = False,
        writer_threads: int = 1,
        timeout: timedelta | None = None,
    ):
        self.writer_threads = writer_threads
        self.store = CheckpointStore(location)
        self.model = model
        optimizers = [] if optimizer is None else (list(optimizer) if isinstance(optimizer, list) else [optimizer])
        self._model_optim = _ModelOptim(model, optimizers)
        self.stateful = dict(stateful or {})
        for name, obj in self.stateful.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"stateful[{name!r}] needs state_dict() and load_state_dict()")
        self.keep = keep
        self.async_save = async_save
        self.distributed = dist.is_available() and dist.is_initialized()
        # Checkpoint collectives run on their own gloo group so an async save can overlap training collectives.
        # ``timeout``: of those collectives (None: torch's default, 30 min; Preemptible passes checkpoint_timeout()).
        self._pg = dist.new_group(backend="gloo", timeout=timeout) if self.distributed else None
        self.last_saved_step: int | None = None
        self._pending: Future | None = None
        self._pending_step: int | None = None
        self._finalize_error: BaseException | None = None
        self._finalized = threading.Event()
        self._lock = threading.Lock()
        self._check_writable_everywhere()

    # ---- collective helpers --------------------------------------------------------------------------------
    def _all_max(self, value: int) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._pg)
        return int(t.item())

    def _barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self._pg)

    def _check_writable_everywhere(self) -> None:
        error: CheckpointDirError | None = None
        try:
            self.store.check_writable(tag=f"-rank{_rank()}")
        except CheckpointDirError as exc:
            error = exc
        if self._all_max(1 if error else 0):
            raise error or CheckpointDirError(
                f"checkpoint location {self.store.display()} is not writable from another rank of this job"
            )

    # ---- resume --------------------------------------------------------------------------------------------
    def latest(self) -> CheckpointInfo | None:
        """Newest complete checkpoint (torn ones are logged and ignored)."""
        listing = self.store.listing()
        for location in listing.torn:
            log.warning("ignoring torn checkpoint %s", location)
        return listing.latest

    def resume(self) -> int:
        """Load the newest complete checkpoint if there is one; returns the step to continue from (0 if none).

        Rank 0 chooses the checkpoint and removes torn ones; every rank loads the same one."""
        chosen = -1
        if _rank() == 0:
            listing = self.store.listing()
            self.store.remove_torn(listing)
            if listing.latest is not None:
                chosen = listing.latest.step
        chosen = self._all_max(chosen)
        if chosen < 0:
            log.info("no checkpoint in %s: starting from step 0", self.store.display())
            return 0
        name = step_dir_name(chosen)
        manifest = self.store.read_manifest(name)
        if manifest is None:
            raise CheckpointError(f"checkpoint {self.store.display(name)} vanished or is unreadable on rank {_rank()}")
        refuse_foreign(self.store.display(name), manifest, os.environ)  # same env on every rank: all refuse
        self.load(CheckpointInfo(chosen, self.store.display(name), manifest))
        return chosen

    def _current_dcp_state(self) -> dict[str, Any]:
        return {"app": self._model_optim}

    def load(self, info: CheckpointInfo) -> None:
        name = step_dir_name(info.step)
        current = tensor_shapes({"app": self._model_optim.state_dict()})
        problems = describe_mismatch(info.manifest.get("tensors", {}), current)
        if problems:
            raise CheckpointMismatchError(
                f"checkpoint {info.location} (step {info.step}) does not fit the model being resumed: "
                + "; ".join(problems)
                + ". Resume with the model configuration that wrote it, or use a new checkpoint location."
            )
        dcp.load(self._current_dcp_state(), storage_reader=self._reader(name), process_group=self._pg,
                 no_dist=not self.distributed)
        extra = self._read_extra(info)
        set_rng_state(extra["rng"])
        for name, obj in self.stateful.items():
            if name not in extra["stateful"]:
                raise CheckpointMismatchError(
                    f"checkpoint {info.location} has no state for {name!r} (it has {sorted(extra['stateful'])})"
                )
            obj.load_state_dict(extra["stateful"][name])
        self.last_saved_step = info.step
        log.info("resumed from %s (step %d, reason %s)", info.location, info.step, info.reason or "?")

    def _read_extra(self, info: CheckpointInfo) -> dict[str, Any]:
        rank = _rank()
        saved_world = int(info.manifest.get("world_size", 1))
        if rank >= saved_world:
            log.warning("checkpoint was written by %d ranks; rank %d takes rank 0's RNG/data state", saved_world, rank)
            rank = 0
        data = self.store.read_bytes(self.store.join(step_dir_name(info.step), f"extra-rank{rank:05d}.pt"))
        # Checkpoints sit on shared storage others may write: never unpickle arbitrary objects from them. The RNG
        # and data states are plain values and tensors, which the weights-only loader allows.
        try:
            return torch.load(io.BytesIO(data), weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointMismatchError(f"checkpoint {info.location}: extra-rank{rank:05d}.pt holds objects the "
                                          f"weights-only loader refuses (not written by this burstd?): {exc}") from None

    # ---- save ----------------------------------------------------------------------------------------------
    def _writer(self, dir_name: str):
        if self.store.is_local:
            return dcp.FileSystemWriter(self.store.join(dir_name), sync_files=True, thread_count=self.writer_threads)
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(self.store.display(dir_name), sync_files=True, thread_count=self.writer_threads)

    def _reader(self, dir_name: str):
        if self.store.is_local:
            return dcp.FileSystemReader(self.store.join(dir_name))
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(self.store.display(dir_name))

    def save(self, step: int, *, reason: str = "periodic", block: bool | None = None) -> None:
        """Checkpoint the state after ``step`` completed steps, on every rank (a collective).

        ``block=False`` (default when ``async_save``) returns once the state is staged in memory; the files are
        written in the background and the checkpoint becomes visible when its manifest lands."""
        block = (not self.async_save) if block is None else block
        self.wait()  # one save in flight at a time
        if self.last_saved_step == step:
            return
        name = step_dir_name(step)
        partial = name + ".partial" if self.store.is_local else name
        self.store.makedirs(self.store.join(partial))
        state = self._current_dcp_state()
        shapes = tensor_shapes({"app": self._model_optim.state_dict()}) if _rank() == 0 else {}
        extra = {"step": step, "rng": rng_state(),
                 "stateful": {n: o.state_dict() for n, o in self.stateful.items()}}
        buf = io.BytesIO()
        torch.save(extra, buf)
        self.store.write_bytes_durable(self.store.join(partial, f"extra-rank{_rank():05d}.pt"), buf.getvalue())
        manifest = _manifest(step, reason, _world(), shapes)
        self.last_saved_step = step
        if block:
            with _zip_crc_off():
                dcp.save(state, storage_writer=self._writer(partial), process_group=self._pg,
                         no_dist=not self.distributed)
            self._finalize(step, partial, manifest)
            self._barrier()
            return
        result = dcp.async_save(state, storage_writer=self._writer(partial), process_group=self._pg,
                                no_dist=not self.distributed)
        # torch 2.6+ answers an AsyncSaveResponse; the upload is what the step waits for
        future = result if isinstance(result, Future) else result.upload_completion
        self._pending, self._pending_step = future, step
        self._finalized.clear()
        future.add_done_callback(lambda f: self._on_async_done(f, step, partial, manifest))

    def _on_async_done(self, future: Future, step: int, partial: str, manifest: dict[str, Any]) -> None:
        try:
            future.result()
            self._finalize(step, partial, manifest)
        except BaseException as exc:  # noqa: BLE001 - surfaced by wait()
            with self._lock:
                self._finalize_error = exc
        finally:
            self._finalized.set()

    def _finalize(self, step: int, partial: str, manifest: dict[str, Any]) -> None:
        """Rank 0, after every rank's shards are written: fsync, manifest last, rename, prune."""
        if _rank() != 0:
            return
        name = step_dir_name(step)
        self.store.fsync_tree(self.store.join(partial))
        fault_point("before-manifest", step)
        manifest = dict(manifest, written_at=time.time())
        self.store.write_bytes_durable(self.store.join(partial, MANIFEST), manifest_bytes(manifest))
        if partial != name:
            self.store.rename_dir(self.store.join(partial), self.store.join(name))
        log.info("checkpoint %s complete (%s)", self.store.display(name), manifest["reason"])
        removed = self.store.prune(self.keep)
        if removed:
            log.info("retention: removed checkpoints at steps %s", removed)

    def save_survivor_copy(self, step: int, extras: Sequence[Mapping[str, Any]], *, tag: str) -> bool:
        """A survivor's just-in-time checkpoint of ``step`` (``burstd.train.survivor``), written by this process
        alone, no collective: the model and optimizer as they are here (every rank holds the same), and
        ``extras[r]`` as rank r's ``extra-rank<r>.pt``. Written into ``step-N.partial-<tag>`` and renamed; returns
        False when another survivor's copy landed first (this one is discarded)."""
        name = step_dir_name(step)
        staging = f"{name}.partial-{tag}" if self.store.is_local else name
        self.store.remove_tree(self.store.join(staging))
        self.store.makedirs(self.store.join(staging))
        with _zip_crc_off():
            dcp.save(self._current_dcp_state(), storage_writer=self._writer(staging), no_dist=True)
        for rank, extra in enumerate(extras):
            buf = io.BytesIO()
            torch.save(dict(extra), buf)
            self.store.write_bytes_durable(self.store.join(staging, f"extra-rank{rank:05d}.pt"), buf.getvalue())
        manifest = _manifest(step, "jit", len(extras), tensor_shapes({"app": self._model_optim.state_dict()}))
        manifest.update(written_at=time.time(), saved_by_rank=_rank())
        self.store.fsync_tree(self.store.join(staging))
        self.store.write_bytes_durable(self.store.join(staging, MANIFEST), manifest_bytes(manifest))
        if self.store.is_local:
            try:  # no replace: a complete step-N is never overwritten, the first survivor's copy stays
                os.rename(self.store.join(staging), self.store.join(name))
            except OSError:
                self.store.remove_tree(self.store.join(staging))
                return False
            fsync_dir(self.store.root)
        self.last_saved_step = step
        log.info("checkpoint %s complete (jit, from rank %d)", self.store.display(name), _rank())
        return True

    def wait(self) -> None:
        """Block until a background save is durable; re-raise its error if it failed."""
        future, self._pending = self._pending, None
        if future is not None:
            try:
                future.result()
            finally:
                self._pending_step = None
            # result() can return before the done-callback (fsync, manifest, rename) has finished
            self._finalized.wait()
            self._barrier()
        with self._lock:
            error, self._finalize_error = self._finalize_error, None
        if error is not None:
            raise CheckpointError(f"background checkpoint save failed: {error}") from error

    def close(self) -> None:
        self.wait()
        if self._pg is not None:
            dist.destroy_process_group(self._pg)
            self._pg = None
