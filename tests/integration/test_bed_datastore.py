"""The bed's data side: a moto S3 server and the metered link as their own processes, ports from the bed slot."""

from __future__ import annotations

import os
import socket
import time

import pytest

from burstd.data import S3Store, TransferError, pull_tree, push_tree
from burstd.data.objectstore import s3_client
from burstd.testbed.datastore import BedDataStore

SLOT = int(os.environ.get("BURSTD_BED_SLOT", "0")) + 71  # this test's own ports, beside a bed of the same slot


@pytest.fixture
def bed_store(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIABURSTDFAKE000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    store = BedDataStore.for_slot(tmp_path / "state", SLOT, rate_bytes_s=4e6)
    try:
        yield store.up()
    finally:
        store.down()


def test_the_bed_store_stages_through_its_link_which_cuts_restores_and_goes_down(bed_store, tmp_path):
    assert bed_store.url.endswith(f":{6823 + 100 * SLOT}")
    S3Store(s3_client(bed_store.store_url, "us-east-1"), "bed-pool").ensure_bucket()
    store = S3Store(s3_client(bed_store.url, "us-east-1", attempts=1, timeout_s=5), "bed-pool")
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(4_000_000))
    t0 = time.monotonic()
    m = push_tree(store, src)
    assert time.monotonic() - t0 >= 0.8  # 4 MB at 4 MB/s less the first burst: the link, not loopback, set it
    bed_store.cut()
    with pytest.raises(TransferError):
        pull_tree(store, m.digest, tmp_path / "out.bin")
    bed_store.restore()
    pull_tree(store, m.digest, tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == src.read_bytes()
    again = BedDataStore.for_slot(bed_store.state_dir, SLOT).up()  # already up: the same processes, no clash
    assert again.url == bed_store.url
    bed_store.down()
    for port in (bed_store.store_port, bed_store.link_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
