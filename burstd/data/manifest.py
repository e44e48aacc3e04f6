"""A dataset named by its content: every file's relative path, size and sha256, and the digest of that list.

The manifest travels through the object store and back, so reading one is reading outside input:
``parse_manifest`` checks every field and refuses a path that would land outside the destination
(absolute, ``..``, empty parts, NUL) with a ``ManifestError`` naming the entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

HASH_BLOCK = 1 << 20
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_MANIFEST_BYTES = 64 << 20  # about 300k files; a bigger "manifest" is the wrong object


class ManifestError(ValueError):
    """A manifest that is not one burstd wrote, or a path that would escape its destination."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, POSIX separators; "" when the dataset is a single file
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]
    single_file: bool = False  # the dataset is one file, not a directory

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        doc = {"version": 1, "single_file": self.single_file,
               "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files]}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        """The dataset's name: the sha256 of its canonical JSON (same files, same bytes -> same digest)."""
        return hashlib.sha256(self.to_json()).hexdigest()


def sha256_file(path: Path, block: int = HASH_BLOCK) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def build_manifest(src: Path) -> Manifest:
    """Hash a file or every regular file under a directory (symlinks are not followed: a link may point anywhere)."""
    if src.is_file():
        st = src.stat()
        return Manifest((FileEntry("", st.st_size, sha256_file(src)),), single_file=True)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such file or directory to stage")
    entries = []
    for root, dirs, names in os.walk(src):
        dirs.sort()
        for name in sorted(names):
            p = Path(root, name)
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(src).as_posix()
            entries.append(FileEntry(checked_relpath(rel, rel), p.stat().st_size, sha256_file(p)))
    return Manifest(tuple(sorted(entries, key=lambda e: e.path)))


def checked_relpath(path: object, where: str) -> str:
    """A relative POSIX path that stays inside its destination, or ManifestError."""
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{where}: path must be a non-empty string")
    if "\x00" in path or "\\" in path:
        raise ManifestError(f"{where}: path {path!r} holds a NUL or a backslash")
    pure = PurePosixPath(path)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in path.split("/")):
        raise ManifestError(f"{where}: path {path!r} must be relative, without '.', '..' or empty parts")
    return path


def parse_manifest(raw: bytes, expect_digest: str | None = None) -> Manifest:
    """Read a manifest; with ``expect_digest``, refuse one whose content is not what was asked for."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest: {len(raw)} bytes, more than {MAX_MANIFEST_BYTES}")
    if expect_digest is not None and hashlib.sha256(raw).hexdigest() != expect_digest:
        raise ManifestError(f"manifest {expect_digest}: content does not match its digest")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"manifest: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ManifestError("manifest: not a version 1 burstd manifest")
    single = doc.get("single_file", False)
    files = doc.get("files")
    if not isinstance(single, bool) or not isinstance(files, list):
        raise ManifestError("manifest: 'single_file' must be a boolean and 'files' a list")
    entries: list[FileEntry] = []
    for i, item in enumerate(files):
        where = f"manifest files[{i}]"
        if not isinstance(item, dict):
            raise ManifestError(f"{where}: must be an object")
        size, digest = item.get("size"), item.get("sha256")
        if type(size) is not int or size < 0:
            raise ManifestError(f"{where}: 'size' must be a non-negative integer")
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
            raise ManifestError(f"{where}: 'sha256' must be 64 lowercase hex digits")
        path = item.get("path")
        if single:
            if path != "" or len(files) != 1:
                raise ManifestError(f"{where}: a single-file manifest holds one entry with path ''")
        else:
            checked_relpath(path, where)
        entries.append(FileEntry(str(path), size, digest))
    paths = [e.path for e in entries]
    if len(set(paths)) != len(paths):
        raise ManifestError("manifest: a path appears twice")
    folders = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    if clash := sorted(folders.intersection(paths)):
        raise ManifestError(f"manifest: {clash[0]!r} is both a file and a folder")
    return Manifest(tuple(entries), single_file=single)


def destination(root: Path, manifest: Manifest, entry: FileEntry) -> Path:
    return root if manifest.single_file else root.joinpath(*entry.path.split("/"))
