"""Moving a burst job's data between on-prem and a pool's cloud side (issue 24, items 2, 3 and 6).

    manifest = build_manifest(Path("/data/imagenet"))              # sha256 of every file; the dataset's digest
    store = S3Store(boto3_client, "burstd-aws-spot")              # the object store near the pool
    push_tree(store, Path("/data/imagenet"), manifest)            # on-prem -> store: resumable, deduplicated
    pull_tree(store, manifest.digest, Path("/scratch/in"))        # store -> node disk: verified, never half-written

The pieces take plain values (bandwidth, capacity, prices are the caller's); nothing here reads burstd's config.
docs/data.md describes the layout in the bucket, the progress record and the node-side commands.
"""

from burstd.data.cache import CacheEntry, PoolCache, StorageMeter, StorageUsage
from burstd.data.link import MeteredLink, TokenBucket
from burstd.data.manifest import FileEntry, Manifest, ManifestError, build_manifest, parse_manifest
from burstd.data.objectstore import S3Store, TransferError
from burstd.data.progress import Progress, ProgressFile, read_progress
from burstd.data.staging import fetch_outputs, publish_outputs, pull_tree, push_tree, stage_in

__all__ = [
    "CacheEntry", "FileEntry", "Manifest", "ManifestError", "MeteredLink", "PoolCache", "Progress", "ProgressFile",
    "S3Store", "StorageMeter", "StorageUsage", "TokenBucket", "TransferError", "build_manifest", "fetch_outputs",
    "parse_manifest", "publish_outputs", "pull_tree", "push_tree", "read_progress", "stage_in",
]
