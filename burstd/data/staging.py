"""Staging a job's data: on-prem -> the store near the pool -> the node's disk, and outputs back.

Head side:  ``stage_in`` (through the pool's cache) and ``fetch_outputs`` (store -> on-prem path, verified).
Node side:  ``pull_tree`` (``burstd-agent stage-in``) and ``publish_outputs`` (``burstd-agent stage-out``).
Every step is idempotent: running it again after a crash, a cut link or a finished run moves only what is
missing (content addressing), and a file appears at its destination only once its sha256 matches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from burstd.data.cache import PoolCache
from burstd.data.manifest import (
    MAX_MANIFEST_BYTES,
    SHA256_HEX,
    FileEntry,
    Manifest,
    ManifestError,
    build_manifest,
    destination,
    parse_manifest,
)
from burstd.data.objectstore import S3Store, TransferError, manifest_key, output_key
from burstd.data.progress import ProgressFile


def _progress(progress: ProgressFile | None, direction: str) -> ProgressFile:
    return progress if progress is not None else ProgressFile(None, direction)


def _run(progress: ProgressFile, manifest: Manifest, work: Callable[[], None]) -> None:
    r = progress.record
    r.dataset, r.files_total, r.bytes_total = manifest.digest, len(manifest.files), manifest.total_bytes
    progress.write()
    try:
        work()
    except BaseException as exc:
        progress.finish(error=str(exc) or type(exc).__name__)
        raise
    progress.finish()


FILE_WORKERS = 8  # small files in flight at once: a dataset of many small files is round trips, not bytes


def _each_file(store: S3Store, entries: Sequence[FileEntry], move: Callable[[FileEntry], object],
               workers: int) -> None:
    """move(entry) for every entry: files of up to one part side by side (``workers`` at once), then the large
    ones one after another (each already moves its parts side by side, and one at a time bounds the memory)."""
    small = [e for e in entries if e.size <= store.part_bytes]
    large = [e for e in entries if e.size > store.part_bytes]
    if workers > 1 and len(small) > 1:
        with ThreadPoolExecutor(workers) as pool:
            for fut in [pool.submit(move, e) for e in small]:
                fut.result()
    else:
        for e in small:
            move(e)
    for e in large:
        move(e)


def push_tree(store: S3Store, src: Path, manifest: Manifest | None = None,
              progress: ProgressFile | None = None, workers: int = FILE_WORKERS) -> Manifest:
    """Put src's files (those not there yet) and its manifest into the store; returns the manifest."""
    manifest = manifest or build_manifest(src)
    prog = _progress(progress, "out")

    def move(entry: FileEntry) -> None:
        store.upload_blob(destination(src, manifest, entry), entry.sha256, entry.size, prog.moved, prog.reused)
        prog.file_done()

    def work() -> None:
        _each_file(store, manifest.files, move, workers)
        store.put_bytes(manifest_key(manifest.digest), manifest.to_json())

    _run(prog, manifest, work)
    return manifest


def read_manifest(store: S3Store, digest: str) -> Manifest:
    if not SHA256_HEX.fullmatch(digest):
        raise ManifestError(f"dataset {digest!r}: not a sha256 digest (64 lowercase hex digits)")
    raw = store.get_bytes(manifest_key(digest), MAX_MANIFEST_BYTES)
    if raw is None:
        raise TransferError(f"dataset {digest}: no manifest in s3://{store.bucket} (not staged in yet?)")
    return parse_manifest(raw, expect_digest=digest)


def pull_tree(store: S3Store, digest: str, dest: Path, progress: ProgressFile | None = None,
              workers: int = FILE_WORKERS) -> Manifest:
    """Bring dataset ``digest`` to dest (a directory, or the file itself for a single-file dataset)."""
    manifest = read_manifest(store, digest)
    prog = _progress(progress, "in")

    def move(entry: FileEntry) -> None:
        store.download_blob(entry.sha256, entry.size, destination(dest, manifest, entry), prog.moved, prog.reused)
        prog.file_done()

    def work() -> None:
        _each_file(store, manifest.files, move, workers)

    _run(prog, manifest, work)
    return manifest


@dataclass
class StageInResult:
    manifest: Manifest
    cache_hit: bool  # every byte was near the pool already: nothing crossed the link
    bytes_moved: int
    bytes_reused: int
    evicted: list[str] = field(default_factory=list)


def stage_in(store: S3Store, cache: PoolCache, src: Path, progress: ProgressFile | None = None,
             keep: frozenset[str] = frozenset(), now: float | None = None,
             workers: int = FILE_WORKERS) -> StageInResult:
    """Head side: make the dataset at src present near the pool, moving only the blobs its cache lacks.

    Room is made (oldest blobs evicted from the store) before bytes move; blobs in ``keep`` (those running jobs
    read) are never evicted. The caller persists ``cache`` (``PoolCache.to_json``) afterwards.
    """
    manifest = build_manifest(src)
    prog = _progress(progress, "in")
    at = time.time() if now is None else now
    cache.reconcile(store.blob_sizes(), at)  # a run that died after storing blobs, before its index was saved
    result = StageInResult(manifest, cache_hit=True, bytes_moved=0, bytes_reused=0)
    needed = keep | {e.sha256 for e in manifest.files}

    lock = threading.Lock()

    def move(entry: FileEntry) -> None:
        moved = store.upload_blob(destination(src, manifest, entry), entry.sha256, entry.size, prog.moved,
                                  prog.reused)
        with lock:
            if moved:
                result.cache_hit = False
                result.bytes_moved += entry.size
            else:
                result.bytes_reused += entry.size
        prog.file_done()

    def work() -> None:
        # room first, one blob at a time (the index is not shared between threads); an entry whose upload then
        # fails is dropped by the next run's reconcile
        for entry in manifest.files:
            if not cache.lookup(entry.sha256, at):
                for victim in cache.plan_admit(entry.size, needed):
                    store.delete_blob(victim)
                    cache.evict(victim, at)
                    result.evicted.append(victim)
                cache.admit(entry.sha256, entry.size, at, needed)
        _each_file(store, manifest.files, move, workers)
        store.put_bytes(manifest_key(manifest.digest), manifest.to_json())
        cache.record_dataset([f"sha256:{manifest.digest}", str(src)], (e.sha256 for e in manifest.files))

    _run(prog, manifest, work)
    return result


def publish_outputs(store: S3Store, job: str, label: str, src: Path,
                    progress: ProgressFile | None = None) -> Manifest:
    """Node side: upload a declared output (file or directory) and name it ``outputs/<job>/<label>``."""
    key = output_key(job, label)
    manifest = push_tree(store, src, progress=progress)
    store.put_bytes(key, manifest.digest.encode())
    return manifest


def fetch_outputs(store: S3Store, job: str, label: str, dest: Path,
                  progress: ProgressFile | None = None) -> Manifest:
    """Head side: bring a job's published output to its on-prem path, every file verified."""
    return pull_tree(store, output_digest(store, job, label), dest, progress)


def output_digest(store: S3Store, job: str, label: str) -> str:
    """The dataset digest a job published as its output ``label`` (checked as outside input by pull_tree)."""
    raw = store.get_bytes(output_key(job, label), 64)
    if raw is None:
        raise TransferError(f"job {job}: no output {label!r} published in s3://{store.bucket}")
    return raw.decode("ascii", "replace").strip()
