"""Command-line entry points of staging, for a Slurm prolog/epilog on the node and for the head.

    burstd-agent stage-in  --bucket B --dataset <sha256> --dest /scratch/job42/in [--progress FILE]
    burstd-agent stage-out --bucket B --job 42 --label results --src /scratch/job42/out
    python -m burstd.data push           --bucket B --src /data/set [--cache-index F --pool P --cache-bytes N]
    python -m burstd.data fetch-outputs  --bucket B --job 42 --label results --dest /home/u/results
    python -m burstd.data progress FILE

Common flags: ``--endpoint-url`` (the store's URL; on the bed the metered link), ``--region``. Credentials come
from boto3's usual chain. Exit status: 0 done; 1 transfer failed (run the same command again: it resumes);
2 bad input (message names the flag or the manifest entry). Each prints one JSON line on success.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from burstd.data.become_user import become
from burstd.data.cache import PoolCache
from burstd.data.manifest import ManifestError
from burstd.data.objectstore import S3Store, TransferError, s3_client
from burstd.data.progress import ProgressFile, read_progress
from burstd.data.staging import output_digest, publish_outputs, pull_tree, push_tree, stage_in

AGENT_COMMANDS = ("stage-in", "stage-out")


def _store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bucket", required=True, help="the object store near the pool")
    p.add_argument("--endpoint-url", help="S3 endpoint (default: the cloud's own)")
    p.add_argument("--region")
    p.add_argument("--progress", type=Path, help="write the progress record (JSON) here")


def parser(prog: str = "python -m burstd.data") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Stage a burst job's data in and out.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("stage-in", help="node: store -> node disk")
    _store_flags(p)
    p.add_argument("--dataset", required=True, help="the dataset's manifest sha256 (what push printed)")
    p.add_argument("--dest", required=True, type=Path)
    p = sub.add_parser("stage-out", help="node: a declared output -> store")
    _store_flags(p)
    p.add_argument("--job", required=True)
    p.add_argument("--label", required=True, help="the output's name (letters, digits, . _ -)")
    p.add_argument("--src", required=True, type=Path)
    p = sub.add_parser("push", help="head: on-prem dataset -> store (through the pool's cache with --cache-index)")
    _store_flags(p)
    p.add_argument("--src", required=True, type=Path)
    p.add_argument("--cache-index", type=Path, help="the pool cache's index file (JSON; made when missing)")
    p.add_argument("--pool", default="pool")
    p.add_argument("--cache-bytes", type=int, default=0, help="the cache's capacity (with --cache-index)")
    p = sub.add_parser("fetch-outputs", help="head: a job's published output -> its on-prem path, verified")
    _store_flags(p)
    p.add_argument("--job", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--dest", required=True, type=Path)
    p.add_argument("--as-user", help="run as root: read the store as root, then write every file as this user")
    p = sub.add_parser("progress", help="print a progress record")
    p.add_argument("file", type=Path)
    return ap


def _cache(args: argparse.Namespace) -> PoolCache | None:
    if args.cache_index is None:
        return None
    if args.cache_index.exists():
        return PoolCache.from_json(args.cache_index.read_text(), where=str(args.cache_index))
    if args.cache_bytes <= 0:
        raise ValueError("--cache-bytes: give the cache's capacity (a positive byte count) for a new --cache-index")
    return PoolCache(args.pool, args.cache_bytes)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run(args: argparse.Namespace) -> dict:
    if args.command == "progress":
        return asdict(read_progress(args.file))
    store = S3Store(s3_client(args.endpoint_url, args.region), args.bucket)
    if args.command == "stage-in":
        m = pull_tree(store, args.dataset, args.dest, ProgressFile(args.progress, "in"))
        return {"dataset": m.digest, "files": len(m.files), "bytes": m.total_bytes, "dest": str(args.dest)}
    if args.command == "stage-out":
        m = publish_outputs(store, args.job, args.label, args.src, ProgressFile(args.progress, "out"))
        return {"dataset": m.digest, "files": len(m.files), "bytes": m.total_bytes}
    if args.command == "fetch-outputs":
        digest = output_digest(store, args.job, args.label)  # the store's client has loaded all it needs
        if args.as_user:
            become(args.as_user)  # before any file is touched
        m = pull_tree(store, digest, args.dest, ProgressFile(args.progress, "out"))
        return {"dataset": m.digest, "files": len(m.files), "bytes": m.total_bytes, "verified": True}
    if not args.src.exists():  # bad input is exit 2 before any call to the store
        raise FileNotFoundError(f"{args.src}: no such file or directory to stage")
    cache = _cache(args)
    store.ensure_bucket()
    if cache is None:
        m = push_tree(store, args.src, progress=ProgressFile(args.progress, "in"))
        return {"dataset": m.digest, "files": len(m.files), "bytes": m.total_bytes}
    r = stage_in(store, cache, args.src, ProgressFile(args.progress, "in"))
    _write_atomically(args.cache_index, cache.to_json())
    return {"dataset": r.manifest.digest, "files": len(r.manifest.files), "bytes": r.manifest.total_bytes,
            "cache_hit": r.cache_hit, "bytes_moved": r.bytes_moved, "evicted": r.evicted}


def main(argv: list[str] | None = None, prog: str = "python -m burstd.data") -> int:
    args = parser(prog).parse_args(argv)
    try:
        out = run(args)
    except (ManifestError, ValueError, FileNotFoundError) as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 2
    except (TransferError, OSError) as exc:  # OSError: the local disk (full, permissions)
        print(f"{prog} {args.command}: {exc} (run it again to resume)", file=sys.stderr)
        return 1
    print(json.dumps(out, sort_keys=True))
    return 0
