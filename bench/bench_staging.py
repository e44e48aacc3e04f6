#!/usr/bin/env python3
"""Staging throughput against a plain copy over the same metered link, in the same run (issue 24, target >= 0.9x).

    python bench/bench_staging.py                                  # 128 MiB, link 8 MiB/s, best of 2
    python bench/bench_staging.py --size-mb 256 --rate-mb 12 --repeat 3 --json out.json

A moto S3 server (its own process) stands for the object store near the pool; a link process
(``python -m burstd.data.link``: token bucket in a TCP relay) stands between "on-prem" and it, and a second one
with the same rate between "on-prem" and a plain file server. Measured, interleaved, at the same rate:

* plain up    the file's bytes streamed raw through the link into a file on the far side (``cat f | nc``)
* stage up    ``push_tree``: sha256 manifest of the file, multipart upload with per-part MD5 (S3 checks it),
              the manifest object; hashing is counted (a head stages a dataset it has not hashed before)
* plain down  a file streamed raw through the link the other way into a file
* stage down  ``pull_tree``: manifest read and checked, ranged GETs into a temporary file, sha256 verified,
              fsync, rename into place

Each figure is the best of ``--repeat`` runs; the ratio is staging throughput / plain throughput (1.00 = staging
moves data as fast as the link lets a plain copy). Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from burstd.data import S3Store, build_manifest
from burstd.data.objectstore import s3_client
from burstd.data.staging import pull_tree, push_tree
from burstd.testbed.procs import free_port

MIB = 1 << 20
BLOCK = 1 << 20


def plain_server(src: Path, dest: Path) -> socket.socket:
    """The far side of a plain copy: a connection that sends b"U" then its bytes is written to dest (fsync);
    one that sends b"D" is sent src's bytes."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            way = conn.recv(1)
            if way == b"U":
                with open(dest, "wb") as f:
                    while data := conn.recv(BLOCK):
                        f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                conn.sendall(b"k")  # written: the sender's clock stops here
            elif way == b"D":
                with open(src, "rb") as f:
                    while data := f.read(BLOCK):
                        conn.sendall(data)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def plain_up(link_addr: tuple[str, int], src: Path) -> float:
    t0 = time.perf_counter()
    s = socket.create_connection(link_addr)
    s.sendall(b"U")
    with open(src, "rb") as f:
        while data := f.read(BLOCK):
            s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    return time.perf_counter() - t0


def plain_down(link_addr: tuple[str, int], dest: Path) -> float:
    t0 = time.perf_counter()
    s = socket.create_connection(link_addr)
    s.sendall(b"D")
    with open(dest, "wb") as f:
        while data := s.recv(BLOCK):
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    s.close()
    return time.perf_counter() - t0


def start_link(target: tuple[str, int], rate: float) -> tuple[subprocess.Popen, tuple[str, int]]:
    """A link process (python -m burstd.data.link), as the bed runs it: its relay does not share our GIL."""
    proc = subprocess.Popen([sys.executable, "-m", "burstd.data.link", "--target", f"{target[0]}:{target[1]}",
                             "--rate-bytes-s", str(rate)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout is not None
    url = json.loads(proc.stdout.readline())["url"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return proc, (host, int(port))


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    # parts kept in memory (moto's default spills every part over ~5 MiB to a temporary file and reads them all
    # back at CompleteMultipartUpload): the fake store should cost as little of the measured time as it can
    env = dict(os.environ, MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=str(1 << 30))
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    raise SystemExit("moto server did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=128, help="dataset size (one file), MiB")
    ap.add_argument("--rate-mb", type=float, default=8, help="the link's bandwidth each way, MiB/s (keep it "
                    "below what the store takes unmetered: the unmetered line shows it)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "AKIABURSTDBENCH00001")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    rate, size = args.rate_mb * MIB, args.size_mb * MIB
    best: dict[str, float] = {}
    completing: list[float] = []
    best_completing = [0.0]
    procs: list[subprocess.Popen] = []
    try:
        moto, moto_url = start_moto()
        procs.append(moto)
        host, port = moto_url.removeprefix("http://").rsplit(":", 1)
        with tempfile.TemporaryDirectory(prefix="bench-staging-") as tmp:
            work = Path(tmp)
            src = work / "dataset.bin"
            with open(src, "wb") as f:
                f.writelines(os.urandom(MIB) for _ in range(args.size_mb))
            plain = plain_server(src, work / "far.bin")
            s3_link, s3_addr = start_link((host, int(port)), rate)
            plain_link, plain_addr = start_link(plain.getsockname()[:2], rate)
            procs += [s3_link, plain_link]
            direct = S3Store(s3_client(moto_url, "us-east-1"), "bench-unmetered")
            direct.ensure_bucket()
            manifest = build_manifest(src)
            entry = manifest.files[0]
            unmetered = _timed(lambda: direct.upload_blob(src, entry.sha256, entry.size))
            print(f"unmetered store upload {size / unmetered / MIB:7.1f} MiB/s (the store's own ceiling here)")
            for i in range(args.repeat):
                bucket = f"bench-{i}"  # a fresh bucket each round: nothing is cached
                S3Store(s3_client(moto_url, "us-east-1"), bucket).ensure_bucket()
                client = s3_client(f"http://{s3_addr[0]}:{s3_addr[1]}", "us-east-1")
                complete = client.complete_multipart_upload

                def timed_complete(_complete=complete, **kw: object) -> object:
                    t0 = time.perf_counter()
                    try:
                        return _complete(**kw)
                    finally:
                        completing.append(time.perf_counter() - t0)

                client.complete_multipart_upload = timed_complete  # the store's own share of stage_up
                store = S3Store(client, bucket)
                runs = {
                    "plain_up": lambda: plain_up(plain_addr, src),
                    "stage_up": lambda store=store: _timed(lambda: push_tree(store, src)),
                    "plain_down": lambda: plain_down(plain_addr, work / "near.bin"),
                    "stage_down": lambda store=store, i=i: _timed(
                        lambda: pull_tree(store, manifest.digest, work / f"node-{i}.bin")),
                }
                for name, run in runs.items():
                    completing.clear()
                    took = run()
                    if name == "stage_up" and took < best.get(name, float("inf")):
                        best_completing[0] = sum(completing)
                    best[name] = min(best.get(name, float("inf")), took)
                    extra = f"  (of which the store's CompleteMultipartUpload {sum(completing):.2f} s)" \
                        if name == "stage_up" else ""
                    print(f"round {i + 1} {name:10s} {took:7.2f} s  {size / took / MIB:7.1f} MiB/s{extra}", flush=True)
                for p in (work / "far.bin", work / "near.bin", work / f"node-{i}.bin"):
                    p.unlink(missing_ok=True)
            plain.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
    mibs = {k: size / v / MIB for k, v in best.items()}
    ratio_up, ratio_down = mibs["stage_up"] / mibs["plain_up"], mibs["stage_down"] / mibs["plain_down"]
    print(f"\n{args.size_mb} MiB over a {args.rate_mb:g} MiB/s metered link, best of {args.repeat}:")
    print(f"{'direction':10s} {'plain MiB/s':>12s} {'staging MiB/s':>14s} {'ratio':>7s}")
    print(f"{'up':10s} {mibs['plain_up']:12.1f} {mibs['stage_up']:14.1f} {ratio_up:7.2f}x")
    print(f"{'down':10s} {mibs['plain_down']:12.1f} {mibs['stage_down']:14.1f} {ratio_down:7.2f}x")
    without = size / (best["stage_up"] - best_completing[0]) / MIB / mibs["plain_up"]
    print(f"up without the store's CompleteMultipartUpload ({best_completing[0]:.2f} s, moto assembling the "
          f"object): {without:.2f}x")
    print(f"target >= 0.90x: {'met' if min(ratio_up, ratio_down) >= 0.9 else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"size_mb": args.size_mb, "rate_mb": args.rate_mb, "mib_s": mibs,
                                         "ratio_up": ratio_up, "ratio_down": ratio_down,
                                         "complete_multipart_s": best_completing[0]}, indent=2))
    return 0


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    raise SystemExit(main())
