"""Checkpoint listing without torch: complete vs torn, retention, writability."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from burstd.train.store import (
    MANIFEST,
    CheckpointDirError,
    CheckpointStore,
    step_dir_name,
)


def _complete(root: Path, step: int, **extra) -> Path:
    d = root / step_dir_name(step)
    d.mkdir(parents=True)
    (d / MANIFEST).write_text(json.dumps({"step": step, "reason": "periodic", **extra}))
    return d


def test_listing_orders_complete_checkpoints_and_reports_torn_ones(tmp_path):
    _complete(tmp_path, 20)
    _complete(tmp_path, 5)
    (tmp_path / "step-000000030.partial").mkdir()  # crashed before rename
    (tmp_path / "step-000000040").mkdir()  # object-store style: shards but no manifest
    bad = tmp_path / "step-000000050"
    bad.mkdir()
    (bad / MANIFEST).write_text("{not json")
    wrong = tmp_path / "step-000000060"
    wrong.mkdir()
    (wrong / MANIFEST).write_text(json.dumps({"step": 59}))  # manifest copied from elsewhere
    (tmp_path / "notes.txt").write_text("ignored")

    listing = CheckpointStore(tmp_path).listing()
    assert [c.step for c in listing.complete] == [5, 20]
    assert listing.latest.step == 20 and listing.latest.reason == "periodic"
    assert sorted(Path(t).name for t in listing.torn) == [
        "step-000000030.partial", "step-000000040", "step-000000050", "step-000000060"]


def test_remove_torn_deletes_only_torn_checkpoints(tmp_path):
    _complete(tmp_path, 1)
    (tmp_path / "step-000000002.partial").mkdir()
    store = CheckpointStore(tmp_path)
    removed = store.remove_torn()
    assert [Path(r).name for r in removed] == ["step-000000002.partial"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001"]


@pytest.mark.parametrize("keep,left", [(1, [9]), (2, [7, 9]), (5, [1, 3, 5, 7, 9]), (0, [1, 3, 5, 7, 9])])
def test_prune_keeps_the_newest_complete_checkpoints(tmp_path, keep, left):
    for step in (1, 3, 5, 7, 9):
        _complete(tmp_path, step)
    store = CheckpointStore(tmp_path)
    store.prune(keep)
    assert [c.step for c in store.listing().complete] == left


def test_missing_location_lists_nothing(tmp_path):
    assert CheckpointStore(tmp_path / "nope").listing().latest is None


def test_check_writable_creates_the_folder_and_leaves_no_probe(tmp_path):
    store = CheckpointStore(tmp_path / "a" / "b")
    store.check_writable()
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []


def test_unwritable_location_error_names_the_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CheckpointDirError, match=rf"checkpoint location {blocker}/ckpt is not writable"):
        CheckpointStore(blocker / "ckpt").check_writable()


def test_empty_location_is_rejected():
    with pytest.raises(CheckpointDirError, match="empty"):
        CheckpointStore("")


def test_file_url_means_local_path(tmp_path):
    store = CheckpointStore(f"file://{tmp_path}")
    assert store.is_local and store.root == str(tmp_path)


def test_fsspec_url_listing_uses_manifest_as_completion_marker():
    store = CheckpointStore("memory://burstd-unit/run1")
    assert not store.is_local
    store.makedirs(store.join("step-000000003"))
    store.write_bytes_durable(store.join("step-000000003", "x.distcp"), b"shard")
    store.write_bytes_durable(store.join("step-000000003", MANIFEST), json.dumps({"step": 3}).encode())
    store.write_bytes_durable(store.join("step-000000004", "x.distcp"), b"shard, no manifest yet")
    listing = store.listing()
    assert [c.step for c in listing.complete] == [3]
    assert listing.complete[0].location == "memory:///burstd-unit/run1/step-000000003"
    assert listing.torn == ["memory:///burstd-unit/run1/step-000000004"]
    store.remove_torn(listing)
    assert store.listing().torn == []
    store.remove_tree(store.root)


def test_step_dir_name_bounds():
    assert step_dir_name(12) == "step-000000012"
    with pytest.raises(ValueError):
        step_dir_name(-1)


def test_importing_burstd_and_torch_free_train_modules_does_not_import_torch():
    code = ("import sys, burstd, burstd.train, burstd.train.signals, burstd.train.store;"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])
