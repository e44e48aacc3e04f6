"""Checkpoint locations: a local directory or an fsspec URL; listing complete vs torn checkpoints.

A checkpoint is a folder ``step-<9 digits>`` holding torch.distributed.checkpoint (DCP) shards, one
``extra-rank<r>.pt`` per rank (RNG, data position, scheduler...), and the manifest ``burstd-checkpoint.json``,
written last. A checkpoint is *complete* when its manifest exists, parses, and names the folder's step;
anything else (a ``.partial`` folder, a folder without a manifest) is *torn* and never loaded.

On a local filesystem a checkpoint is written as ``step-N.partial`` and renamed to ``step-N`` after the manifest
(files and the parent folder fsynced), so a crash leaves either the old set or the new one. Object stores have no
atomic rename: there the manifest written last is what makes a checkpoint complete.

This module does not import torch (``burstctl`` and job scripts read checkpoints with it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("burstd.train")

MANIFEST = "burstd-checkpoint.json"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{9})$")
_PARTIAL_DIR = re.compile(r"^step-(\d{9})\.partial(-[A-Za-z0-9_]+)?$")  # -TAG: a survivor's staging copy


class CheckpointError(Exception):
    """Base class for checkpoint problems a user must act on."""


class CheckpointDirError(CheckpointError):
    """The checkpoint location cannot be created or written."""


class CheckpointMismatchError(CheckpointError):
    """The newest complete checkpoint does not fit the model/optimizer being resumed."""


def step_dir_name(step: int) -> str:
    if step < 0 or step > 999_999_999:
        raise ValueError(f"checkpoint step must be 0..999999999, got {step}")
    return f"step-{step:09d}"


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    location: str  # path or URL of the checkpoint folder
    manifest: dict[str, Any]

    @property
    def reason(self) -> str:
        return str(self.manifest.get("reason", ""))


@dataclass(frozen=True)
class Listing:
    complete: list[CheckpointInfo]  # oldest first
    torn: list[str]  # locations of torn checkpoints

    @property
    def latest(self) -> CheckpointInfo | None:
        return self.complete[-1] if self.complete else None


class CheckpointStore:
    """Where checkpoints live. ``CheckpointStore("/shared/ckpt/run1")`` or ``CheckpointStore("s3://b/run1")``."""

    def __init__(self, location: str | os.PathLike[str]):
        text = os.fspath(location)
        if not text:
            raise CheckpointDirError("checkpoint location is empty")
        text = text.removeprefix("file://")
        self.url = text
        self.is_local = "://" not in text
        self.fs: Any = None  # fsspec's filesystem, for a URL location
        if self.is_local:
            self.root = str(Path(text).expanduser().absolute())
        else:
            try:
                from fsspec.core import url_to_fs
            except ImportError as exc:  # pragma: no cover - fsspec is in the train extra
                raise CheckpointDirError(f"checkpoint location {text!r} is a URL but fsspec is not installed") from exc
            self.fs, self.root = url_to_fs(text)

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r})"

    @property
    def _remote(self) -> Any:
        """The fsspec filesystem of a URL location; the local branches never ask for one."""
        if self.fs is None:
            raise CheckpointDirError(f"{self.url}: a local folder has no object-store filesystem")
        return self.fs

    # ---- paths -------------------------------------------------------------------------------------------
    def join(self, *parts: str) -> str:
        if self.is_local:
            return os.path.join(self.root, *parts)
        return "/".join([self.root.rstrip("/"), *parts])

    def display(self, *parts: str) -> str:
        """A location a human (or fsspec) can use: the URL for object stores."""
        if self.is_local:
            return self.join(*parts)
        protocol = self._remote.protocol
        protocol = protocol if isinstance(protocol, str) else protocol[0]
        return f"{protocol}://{self.join(*parts)}"

    # ---- primitives --------------------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.is_local:
            os.makedirs(path, exist_ok=True)
        else:
            self._remote.makedirs(path, exist_ok=True)

    def names(self) -> list[str]:
        if self.is_local:
            try:
                return sorted(os.listdir(self.root))
            except FileNotFoundError:
                return []
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self._remote.ls(self.root, detail=False))
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(path) if self.is_local else self._remote.exists(path)

    def read_bytes(self, path: str) -> bytes:
        if self.is_local:
            with open(path, "rb") as fh:
                return fh.read()
        return self._remote.cat_file(path)

    def write_bytes_durable(self, path: str, data: bytes) -> None:
        """Write a whole file so that it is either absent or complete after a crash (temp, fsync, rename)."""
        if self.is_local:
            tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            fsync_dir(os.path.dirname(path))
        else:
            with self._remote.open(path, "wb") as fh:  # object stores: the PUT is atomic
                fh.write(data)

    def remove_tree(self, path: str) -> None:
        if self.is_local:
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                self._remote.rm(path, recursive=True)
            except FileNotFoundError:
                pass

    def rename_dir(self, src: str, dst: str) -> None:
        if self.is_local:
            if os.path.exists(dst):
                shutil.rmtree(dst)
            os.rename(src, dst)
            fsync_dir(os.path.dirname(dst))
        else:  # pragma: no cover - object stores write in place
            self._remote.mv(src, dst, recursive=True)

    def fsync_tree(self, path: str) -> None:
        if not self.is_local:
            return
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_dir(dirpath)

    # ---- checks ------------------------------------------------------------------------------------------
    def check_writable(self, tag: str = "") -> None:
        """Create the location and write/remove a probe file; :class:`CheckpointDirError` naming the location
        and the OS error otherwise. Called at start-up so a bad location fails before any training."""
        probe = self.join(f".burstd-probe-{socket.gethostname()}-{os.getpid()}{tag}")
        try:
            self.makedirs(self.root)
            self.write_bytes_durable(probe, b"ok")
            if self.is_local:
                os.unlink(probe)
            else:
                self._remote.rm(probe)
        except (OSError, PermissionError) as exc:
            raise CheckpointDirError(
                f"checkpoint location {self.display()} is not writable: {exc.__class__.__name__}: {exc}. "
                "Point --ckpt-dir (or CheckpointManager(location)) at a folder this job can write, "
                "on storage every node of the job sees."
            ) from exc

    # ---- listing -----------------------------------------------------------------------------------------
    def read_manifest(self, name: str) -> dict[str, Any] | None:
        """The manifest of checkpoint folder ``name`` if it is complete, else None."""
        match = _STEP_DIR.match(name)
        if not match:
            return None
        path = self.join(name, MANIFEST)
        try:
            data = json.loads(self.read_bytes(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as exc:
            log.warning("checkpoint %s: unreadable manifest (%s); treating as torn", self.display(name), exc)
            return None
        if not isinstance(data, dict) or data.get("step") != int(match.group(1)):
            return None
        return data

    def listing(self) -> Listing:
        complete: list[CheckpointInfo] = []
        torn: list[str] = []
        for name in self.names():
            if _PARTIAL_DIR.match(name):
                torn.append(self.display(name))
                continue
            match = _STEP_DIR.match(name)
            if not match:
                continue
            manifest = self.read_manifest(name)
            if manifest is None:
                torn.append(self.display(name))
            else:
                complete.append(CheckpointInfo(int(match.group(1)), self.display(name), manifest))
        complete.sort(key=lambda c: c.step)
        return Listing(complete, torn)

    def remove_torn(self, listing: Listing | None = None) -> list[str]:
        """Delete torn checkpoints (logged); returns their locations."""
        listing = listing or self.listing()
        for location in listing.torn:
            log.warning("skipping torn checkpoint %s (no complete manifest); removing it", location)
            self.remove_tree(self._strip(location))
        return listing.torn

    def prune(self, keep: int) -> list[int]:
        """Keep the newest ``keep`` complete checkpoints; returns the steps removed."""
        if keep <= 0:
            return []
        complete = self.listing().complete
        removed = []
        for info in complete[:-keep]:
            self.remove_tree(self.join(step_dir_name(info.step)))
            removed.append(info.step)
        return removed

    def _strip(self, location: str) -> str:
        return location.split("://", 1)[1] if "://" in location else location


def fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
