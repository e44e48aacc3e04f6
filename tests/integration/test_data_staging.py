"""Staging against a real moto S3 server over HTTP, through the metered link, with real files and processes.

The story: a dataset goes from on-prem to the store near the pool and onto a node's disk; a second job finds it
cached; a job's output comes home verified; a transfer killed mid-way (process and link) resumes with nothing
lost or half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.data import MeteredLink, PoolCache, S3Store, StorageUsage, TransferError
from burstd.data.objectstore import blob_key, s3_client
from burstd.data.progress import ProgressFile, read_progress
from burstd.data.staging import fetch_outputs, publish_outputs, pull_tree, push_tree, stage_in
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401  (fixtures)

MIB = 1 << 20
BUCKET = "burstd-pool-aws"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3(aws_env):  # noqa: F811  (the fixture it uses)
    """(store URL, a fresh bucket's S3Store) straight to moto."""
    store = S3Store(s3_client(aws_env.moto_url, "us-east-1"), BUCKET, part_bytes=5 * MIB)
    store.ensure_bucket()
    return aws_env.moto_url, store


def moto_addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def dataset(root: Path, sizes: dict[str, int], seed: int = 0) -> Path:
    for i, (rel, size) in enumerate(sizes.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size) if size else b"")
    return root


def same_tree(a: Path, b: Path) -> bool:
    def listing(r: Path) -> dict[str, str]:
        return {p.relative_to(r).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in r.rglob("*") if p.is_file()}
    return listing(a) == listing(b)


def test_a_dataset_goes_to_the_store_and_onto_the_node_disk_verified(s3, tmp_path):
    _, store = s3
    src = dataset(tmp_path / "onprem", {"train/a.bin": 12 * MIB + 7, "train/b.bin": 1000, "empty": 0})
    m = push_tree(store, src)
    progress = tmp_path / "progress.json"
    pulled = pull_tree(store, m.digest, tmp_path / "node", ProgressFile(progress, "in"))
    assert pulled == m and same_tree(src, tmp_path / "node")
    rec = read_progress(progress)
    assert (rec.state, rec.files_done, rec.bytes_done, rec.bytes_total) == ("done", 3, m.total_bytes, m.total_bytes)
    assert not list((tmp_path / "node").rglob(".*partial"))


def test_staging_again_moves_nothing_and_the_node_side_is_idempotent(s3, tmp_path):
    _, store = s3
    src = dataset(tmp_path / "onprem", {"x.bin": 6 * MIB})
    m = push_tree(store, src)
    again = ProgressFile(None, "in")
    push_tree(store, src, progress=again)
    assert again.record.bytes_reused == m.total_bytes
    pull_tree(store, m.digest, tmp_path / "node")
    second = ProgressFile(None, "in")
    pull_tree(store, m.digest, tmp_path / "node", second)
    assert second.record.bytes_reused == m.total_bytes


def test_the_pool_cache_serves_a_second_job_and_evicts_the_oldest_dataset_from_the_store(s3, tmp_path):
    _, store = s3
    booked: list[StorageUsage] = []

    class Meter:
        def record_storage(self, usages: list[StorageUsage]) -> None:
            booked.extend(usages)

    cache = PoolCache("aws", capacity_bytes=3 * MIB, meter=Meter())
    first = dataset(tmp_path / "d1", {"a": 2 * MIB})
    r1 = stage_in(store, cache, first, now=100)
    assert not r1.cache_hit and r1.bytes_moved == 2 * MIB
    assert cache.present_keys() == {f"sha256:{r1.manifest.digest}", str(first)}  # what decide() reads as near
    r2 = stage_in(store, cache, first, now=200)  # the second job sharing the dataset
    assert r2.cache_hit and r2.bytes_moved == 0
    other = dataset(tmp_path / "d2", {"b": 2 * MIB})
    r3 = stage_in(store, cache, other, now=300)
    old = r1.manifest.files[0].sha256
    assert r3.evicted == [old] and not store.has_blob(old, 2 * MIB)
    assert cache.present_keys() == {f"sha256:{r3.manifest.digest}", str(other)}
    assert store.blob_sizes() == {r3.manifest.files[0].sha256: 2 * MIB}
    assert [(u.digest, u.byte_seconds) for u in booked] == [(old, 2 * MIB * 200)]


def test_a_jobs_output_comes_back_to_its_onprem_path_verified(s3, tmp_path):
    _, store = s3
    out = dataset(tmp_path / "node-out", {"model.pt": 7 * MIB, "log/train.txt": 300})
    publish_outputs(store, "42", "results", out)
    fetch_outputs(store, "42", "results", tmp_path / "home" / "results")
    assert same_tree(out, tmp_path / "home" / "results")
    with pytest.raises(TransferError, match="no output 'ckpt'"):
        fetch_outputs(store, "42", "ckpt", tmp_path / "home" / "ckpt")


def test_a_blob_corrupted_in_the_store_is_never_renamed_into_place(s3, tmp_path):
    _, store = s3
    f = tmp_path / "one.bin"
    f.write_bytes(b"good" * 1000)
    m = push_tree(store, f)
    store.client.put_object(Bucket=BUCKET, Key=blob_key(m.files[0].sha256), Body=b"evil" * 1000,
                            Metadata={"sha256": m.files[0].sha256})
    with pytest.raises(TransferError, match="does not match"):
        pull_tree(store, m.digest, tmp_path / "node.bin")
    assert not (tmp_path / "node.bin").exists() and list(tmp_path.glob(".node.bin*")) == []


def cli(*args: str, progress: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "burstd.agent.main", *args, "--progress", str(progress)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def data_cli(*args: str, progress: Path) -> subprocess.Popen:
    """The head side's entry point (python -m burstd.data), as a process that can be killed."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "burstd.data", *args, "--progress", str(progress)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_bytes(progress: Path, at_least: int, proc: subprocess.Popen, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            done = read_progress(progress).bytes_done
        except (OSError, ValueError):
            done = 0
        if done >= at_least:
            return done
        time.sleep(0.05)
    raise AssertionError(f"no progress past {at_least} bytes in {timeout}s")


@pytest.mark.slow
def test_killing_the_link_and_the_transfer_mid_stage_in_loses_nothing_and_resumes(s3, tmp_path):
    url, store = s3
    # both over one part (8 MiB by default), so they move one after the other: shard0 first
    src = dataset(tmp_path / "onprem", {"shard0.bin": 20 * MIB, "shard1.bin": 9 * MIB})
    m = push_tree(store, src)
    dest, progress = tmp_path / "node", tmp_path / "in.json"
    with MeteredLink(moto_addr(url), rate_bytes_s=4 * MIB) as link:
        proc = cli("stage-in", "--bucket", BUCKET, "--endpoint-url", link.url, "--dataset", m.digest,
                   "--dest", str(dest), progress=progress)
        wait_for_bytes(progress, 6 * MIB, proc)
        link.cut()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # nothing half-written: no destination file exists yet, only a temporary partial one
        assert not any(p.name.startswith("shard") for p in dest.glob("*"))
        partial = sorted(dest.glob(".shard*.partial"))
        assert [p.name[:11] for p in partial] == [".shard0.bin"] and 0 < partial[0].stat().st_size < 20 * MIB
        kept = partial[0].stat().st_size
        link.restore()
        proc = cli("stage-in", "--bucket", BUCKET, "--endpoint-url", link.url, "--dataset", m.digest,
                   "--dest", str(dest), progress=progress)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["dataset"] == m.digest
    assert same_tree(src, dest) and not list(dest.glob(".*"))
    rec = read_progress(progress)
    assert rec.state == "done" and rec.bytes_reused >= kept  # resumed from what was there, not from zero
    assert link.bytes_down < m.total_bytes + kept + 2 * MIB  # moved about once over both runs, not twice


@pytest.mark.slow
def test_a_cut_link_fails_a_stage_out_cleanly_and_a_rerun_resumes_from_the_finished_parts(s3, tmp_path):
    url, store = s3
    # 48 MiB at 4 MiB/s: the kill at 12 MiB leaves nine seconds of upload, so even a loaded machine cuts it midway
    out = dataset(tmp_path / "node-out", {"ckpt.pt": 48 * MIB})
    progress = tmp_path / "out.json"
    with MeteredLink(moto_addr(url), rate_bytes_s=4 * MIB) as link:
        proc = cli("stage-out", "--bucket", BUCKET, "--endpoint-url", link.url, "--job", "7", "--label", "ckpt",
                   "--src", str(out), progress=progress)
        wait_for_bytes(progress, 12 * MIB, proc)
        link.cut()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert store.blob_sizes() == {}  # no half object visible
        link.restore()
        proc = cli("stage-out", "--bucket", BUCKET, "--endpoint-url", link.url, "--job", "7", "--label", "ckpt",
                   "--src", str(out), progress=progress)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert read_progress(progress).bytes_reused >= 10 * MIB  # the parts finished before the kill were kept
    fetch_outputs(store, "7", "ckpt", tmp_path / "home")
    assert same_tree(out, tmp_path / "home")


def test_a_cut_link_is_a_transfer_error_that_says_to_run_again(s3, tmp_path):
    url, store = s3
    f = tmp_path / "big.bin"
    f.write_bytes(os.urandom(12 * MIB))
    m = push_tree(store, f)
    with MeteredLink(moto_addr(url), rate_bytes_s=8 * MIB) as link:
        slow = S3Store(s3_client(link.url, "us-east-1", attempts=1, timeout_s=5), BUCKET, part_bytes=5 * MIB)
        progress = ProgressFile(None, "in")
        import threading

        threading.Timer(0.6, link.cut).start()
        with pytest.raises(TransferError):
            pull_tree(slow, m.digest, tmp_path / "node.bin", progress)
        assert progress.record.state == "failed" and progress.record.error
        assert not (tmp_path / "node.bin").exists()
        link.restore()
        pull_tree(slow, m.digest, tmp_path / "node.bin")
    assert hashlib.sha256((tmp_path / "node.bin").read_bytes()).hexdigest() == m.files[0].sha256


@pytest.mark.slow
def test_the_head_killed_mid_push_leaves_a_cache_index_that_the_rerun_makes_whole(s3, tmp_path):
    url, store = s3
    src = dataset(tmp_path / "onprem", {"a.bin": 6 * MIB, "b.bin": 24 * MIB})
    index, progress = tmp_path / "cache-aws.json", tmp_path / "push.json"
    args = ("push", "--bucket", BUCKET, "--src", str(src), "--cache-index", str(index), "--pool", "aws",
            "--cache-bytes", str(64 * MIB))
    with MeteredLink(moto_addr(url), rate_bytes_s=4 * MIB) as link:
        proc = data_cli(*args, "--endpoint-url", link.url, progress=progress)
        wait_for_bytes(progress, 6 * MIB, proc)  # a.bin stored; b.bin (6 s of link) just begun
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert not index.exists()  # the index is written at the end only
        assert len(store.blob_sizes()) == 1
        proc = data_cli(*args, "--endpoint-url", link.url, progress=progress)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert not result["cache_hit"] and result["bytes_moved"] == 24 * MIB, result  # a.bin was not sent again
    cache = PoolCache.from_json(index.read_text())
    assert {d: e.size_bytes for d, e in cache.entries.items()} == store.blob_sizes()
    assert sorted(store.blob_sizes().values()) == [6 * MIB, 24 * MIB]
    again = data_cli(*args, "--endpoint-url", url, progress=progress)
    out, _ = again.communicate(timeout=60)
    assert json.loads(out)["cache_hit"] is True


def test_a_dataset_of_many_small_files_moves_them_side_by_side_and_lands_whole(s3, tmp_path):
    url, _ = s3
    sizes = {f"shard{i:03d}/part.bin": 20_000 + i for i in range(60)} | {"big.bin": 11 * MIB}
    src = dataset(tmp_path / "onprem", sizes)
    with MeteredLink(moto_addr(url), rate_bytes_s=16 * MIB) as link:
        linked = S3Store(s3_client(link.url, "us-east-1"), BUCKET, part_bytes=5 * MIB)
        up = ProgressFile(tmp_path / "up.json", "out")
        m = push_tree(linked, src, progress=up)
        down = ProgressFile(tmp_path / "down.json", "in")
        pull_tree(linked, m.digest, tmp_path / "node", down, workers=8)
    assert same_tree(src, tmp_path / "node")
    for rec in (read_progress(tmp_path / "up.json"), read_progress(tmp_path / "down.json")):
        assert (rec.state, rec.files_done, rec.bytes_done) == ("done", 61, m.total_bytes)


class _Counting:
    """The real boto3 client, counting the calls made through it (and optionally rewriting complete's answer)."""

    def __init__(self, client, etag: str | None = None):
        self.client, self.etag, self.calls = client, etag, []

    def __getattr__(self, name):
        real = getattr(self.client, name)
        if not callable(real) or name.startswith("get_paginator"):
            return real

        def call(**kw):
            self.calls.append(name)
            answer = real(**kw)
            if name == "complete_multipart_upload" and self.etag is not None:
                answer = {**answer, "ETag": self.etag}
            return answer

        return call


@pytest.mark.parametrize("etag", [None, '"an-etag-of-another-kind"'])
def test_a_large_upload_trusts_completes_etag_or_else_asks_the_store(s3, tmp_path, etag):
    """The store's ETag of a multipart object names its parts' MD5s: when it is the one expected, no HEAD follows
    the completion (and the unfinished uploads were listed once, while the blob was checked); a store that names
    objects otherwise is asked whether the blob is whole."""
    _, direct = s3
    src = dataset(tmp_path / "src", {"big.bin": 17 * MIB})  # 4 parts
    counting = _Counting(direct.client, etag)
    store = S3Store(counting, direct.bucket, part_bytes=5 * MIB)
    manifest = push_tree(store, src)
    entry = manifest.files[0]
    assert counting.calls.count("complete_multipart_upload") == 1
    assert counting.calls.count("list_multipart_uploads") == 1
    assert counting.calls.count("head_object") == (1 if etag is None else 2)
    assert direct.has_blob(entry.sha256, entry.size)
    pull_tree(direct, manifest.digest, tmp_path / "back")
    assert same_tree(src, tmp_path / "back")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_fetch_outputs_as_root_with_as_user_writes_every_file_as_that_user(s3, tmp_path):
    """The daemon's default (no ``[data] user_python``): its own Python, started as root, takes the job's user's
    ids before it touches a file: the files are the user's, and a folder the user cannot write stays untouched."""
    import pwd
    import shutil
    import tempfile

    url, store = s3
    nobody = pwd.getpwnam("nobody")
    out = dataset(tmp_path / "node-out", {"model.pt": 6 * MIB, "log/train.txt": 300})
    publish_outputs(store, "43", "out-0", out)
    home = Path(tempfile.mkdtemp(prefix="burstd-as-user-", dir="/tmp"))  # reachable by nobody (tmp_path is not)
    try:
        home.chmod(0o755)
        mine = home / "nobody"
        mine.mkdir()
        os.chown(mine, nobody.pw_uid, nobody.pw_gid)

        def fetch(dest: Path) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "burstd.data", "fetch-outputs", "--bucket", BUCKET,
                                   "--endpoint-url", url, "--job", "43", "--label", "out-0", "--dest", str(dest),
                                   "--as-user", "nobody"], check=False, capture_output=True, text=True,
                                  timeout=120,
                                  env=dict(os.environ, PYTHONPATH=str(REPO)))

        done = fetch(mine / "results")
        assert done.returncode == 0, done.stderr
        assert same_tree(out, mine / "results")
        owners = {(p.stat().st_uid, p.stat().st_gid) for p in (mine / "results").rglob("*")}
        assert owners == {(nobody.pw_uid, nobody.pw_gid)}
        refused = fetch(home / "roots")  # home is root's, 0755: nobody cannot make a folder in it
        assert refused.returncode == 1 and "Permission denied" in refused.stderr
        assert not (home / "roots").exists()
    finally:
        shutil.rmtree(home)
