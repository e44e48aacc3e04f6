"""Datasets named by content; manifests read back as outside input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstd.data.manifest import (
    FileEntry,
    Manifest,
    ManifestError,
    build_manifest,
    destination,
    parse_manifest,
)

HEX = "a" * 64


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def test_manifest_lists_every_file_with_its_sha256_and_the_digest_follows_content_only(tmp_path):
    a = tree(tmp_path / "a", {"x.bin": b"1" * 10, "sub/y.txt": b"hello"})
    b = tree(tmp_path / "b", {"sub/y.txt": b"hello", "x.bin": b"1" * 10})
    m = build_manifest(a)
    assert [(f.path, f.size) for f in m.files] == [("sub/y.txt", 5), ("x.bin", 10)]
    assert m.files[0].sha256 == hashlib.sha256(b"hello").hexdigest()
    assert m.digest == build_manifest(b).digest and m.total_bytes == 15
    (b / "x.bin").write_bytes(b"2" * 10)
    assert build_manifest(b).digest != m.digest


def test_symlinks_are_not_followed(tmp_path):
    root = tree(tmp_path / "d", {"real": b"r"})
    (root / "link").symlink_to("/etc/passwd")
    assert [f.path for f in build_manifest(root).files] == ["real"]


def test_a_single_file_dataset_lands_at_the_destination_itself(tmp_path):
    f = tmp_path / "one.bin"
    f.write_bytes(b"x")
    m = build_manifest(f)
    assert m.single_file and destination(tmp_path / "there", m, m.files[0]) == tmp_path / "there"
    assert parse_manifest(m.to_json(), m.digest) == m


def test_parse_round_trips_and_checks_the_digest(tmp_path):
    m = build_manifest(tree(tmp_path, {"a": b"1", "b/c": b"2"}))
    assert parse_manifest(m.to_json(), expect_digest=m.digest) == m
    with pytest.raises(ManifestError, match="does not match its digest"):
        parse_manifest(m.to_json(), expect_digest="0" * 64)


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", "", "a\\b", "a\x00b", 7])
def test_a_path_that_could_leave_the_destination_is_refused(path):
    raw = json.dumps({"version": 1, "files": [{"path": path, "size": 1, "sha256": HEX}]}).encode()
    with pytest.raises(ManifestError, match=r"files\[0\]"):
        parse_manifest(raw)


@pytest.mark.parametrize("entry, words", [
    ({"path": "a", "size": -1, "sha256": HEX}, "size"),
    ({"path": "a", "size": True, "sha256": HEX}, "size"),
    ({"path": "a", "size": 1, "sha256": "A" * 64}, "sha256"),
    ("a", "must be an object"),
])
def test_bad_fields_name_the_entry_and_the_key(entry, words):
    with pytest.raises(ManifestError, match=words):
        parse_manifest(json.dumps({"version": 1, "files": [entry]}).encode())


def test_a_path_that_is_both_a_file_and_a_folder_is_refused():
    files = [{"path": "a/b", "size": 1, "sha256": HEX}, {"path": "a/b/c", "size": 1, "sha256": HEX}]
    with pytest.raises(ManifestError, match="'a/b' is both a file and a folder"):
        parse_manifest(json.dumps({"version": 1, "files": files}).encode())


def test_duplicate_paths_and_foreign_documents_are_refused():
    dup = {"version": 1, "files": [{"path": "a", "size": 1, "sha256": HEX}] * 2}
    with pytest.raises(ManifestError, match="twice"):
        parse_manifest(json.dumps(dup).encode())
    for raw in (b"not json", b"[]", b'{"version": 2, "files": []}'):
        with pytest.raises(ManifestError):
            parse_manifest(raw)


names = st.text(alphabet="abcxyz019._-", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


def on_a_disk(files: dict) -> bool:
    """No path is also another's folder (a disk cannot hold both)."""
    return not any(q.startswith(p + "/") for p in files for q in files)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.lists(names, min_size=1, max_size=3).map("/".join),
                       st.tuples(st.integers(0, 2**40), st.binary(min_size=32, max_size=32)), max_size=6)
       .filter(on_a_disk))
def test_any_manifest_burstd_writes_reads_back_equal(files):
    entries = tuple(sorted((FileEntry(p, size, raw.hex()) for p, (size, raw) in files.items()), key=lambda e: e.path))
    m = Manifest(entries)
    assert parse_manifest(m.to_json(), m.digest) == m
