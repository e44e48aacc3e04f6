"""The object store near a pool, through the cloud's own client (boto3 S3; moto's server on the bed and in tests).

Layout in the bucket (content-addressed, so writing the same thing twice is a no-op):

    blobs/sha256/<hex>           one file's bytes; metadata sha256=<hex>
    manifests/<hex>.json         a dataset's manifest (burstd.data.manifest); <hex> is the sha256 of these bytes
    outputs/<job>/<label>        the manifest digest of a job's declared output, written by the node

Uploads are multipart, each part's MD5 checked by S3 (Content-MD5) and, on a resumed upload, compared with the
part already there, so a killed upload continues from the parts it finished. Downloads go to a temporary name
beside the destination in one open-ended ranged read, resume from the bytes that temporary file holds, and are renamed into
place only when the whole file's sha256 matches: a destination is absent or complete, never half-written.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from burstd.data.manifest import HASH_BLOCK

PART_BYTES = 8 << 20  # S3's floor is 5 MiB a part (but the last); 8 MiB is boto3's own default
MAX_PARTS = 10_000
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class TransferError(RuntimeError):
    """A transfer that did not complete (link down, store refused, checksum mismatch); running it again resumes."""


def blob_key(digest: str) -> str:
    return f"blobs/sha256/{digest}"


def manifest_key(digest: str) -> str:
    return f"manifests/{digest}.json"


def output_key(job: str, label: str) -> str:
    for what, value in (("job", job), ("label", label)):
        if not NAME.fullmatch(value):
            raise ValueError(f"output {what} {value!r}: use letters, digits, '.', '_' and '-' (at most 128)")
    return f"outputs/{job}/{label}"


def s3_client(endpoint_url: str | None = None, region: str | None = None, attempts: int = 3,
              timeout_s: float = 30.0) -> Any:
    """A boto3 S3 client; credentials come from the usual chain (environment, instance profile)."""
    import boto3
    from botocore.config import Config as BotoConfig

    # our own checksums (Content-MD5 a part, sha256 a file) cover every byte: botocore's extra CRC32 on each
    # request and response would hash everything a third time
    cfg = BotoConfig(s3={"addressing_style": "path"}, connect_timeout=timeout_s, read_timeout=timeout_s,
                     retries={"max_attempts": attempts, "mode": "standard"},
                     request_checksum_calculation="when_required", response_checksum_validation="when_required",
                     max_pool_connections=16)
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=cfg)


def _multipart_etag(part_md5s: list[str]) -> str:
    joined = b"".join(bytes.fromhex(m) for m in part_md5s)
    return f"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(part_md5s)}"


def _md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


class S3Store:
    """One bucket near one pool. ``moved(n)`` / ``reused(n)`` callbacks report bytes for progress records."""

    def __init__(self, client: Any, bucket: str, part_bytes: int = PART_BYTES, workers: int = 4,
                 read_attempts: int = 3):
        if part_bytes < 5 << 20:
            raise ValueError(f"part_bytes {part_bytes}: S3 needs at least 5 MiB a part")
        self.client, self.bucket, self.part_bytes, self.workers = client, bucket, part_bytes, workers
        self.read_attempts = read_attempts

    def _call(self, what: str, fn: Callable[..., Any], **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kw)
        except (BotoCoreError, ClientError) as exc:
            raise TransferError(f"s3://{self.bucket}/{kw.get('Key', '')}: {what} failed: {exc}") from exc

    def ensure_bucket(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self._call("create bucket", self.client.create_bucket)
        except BotoCoreError as exc:
            raise TransferError(f"s3://{self.bucket}: unreachable: {exc}") from exc

    # small objects: manifests and output pointers
    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("put", self.client.put_object, Key=key, Body=data, ContentMD5=_md5_b64(data))

    def get_bytes(self, key: str, limit: int) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
            if obj["ContentLength"] > limit:
                raise TransferError(f"s3://{self.bucket}/{key}: {obj['ContentLength']} bytes, more than {limit}")
            return bytes(obj["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise TransferError(f"s3://{self.bucket}/{key}: get failed: {exc}") from exc
        except (BotoCoreError, OSError) as exc:  # the link: refused, reset, timed out
            raise TransferError(f"s3://{self.bucket}/{key}: get failed: {exc}") from exc

    def has_blob(self, digest: str, size: int) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=blob_key(digest))
        except ClientError:
            return False
        except BotoCoreError as exc:  # the store unreachable is not "absent"
            raise TransferError(f"s3://{self.bucket}/{blob_key(digest)}: head failed: {exc}") from exc
        return bool(head["ContentLength"] == size and head.get("Metadata", {}).get("sha256") == digest)

    def delete_blob(self, digest: str) -> None:
        self._call("delete", self.client.delete_object, Key=blob_key(digest))

    def blob_sizes(self) -> dict[str, int]:
        """Every blob in the bucket: digest -> size (to rebuild a cache index)."""
        out: dict[str, int] = {}
        for page in self._pages("list", "list_objects_v2", Prefix="blobs/sha256/"):
            for obj in page.get("Contents", []):
                out[obj["Key"].rsplit("/", 1)[1]] = obj["Size"]
        return out

    def _pages(self, what: str, operation: str, **kw: Any) -> list[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return list(self.client.get_paginator(operation).paginate(Bucket=self.bucket, **kw))
        except (BotoCoreError, ClientError) as exc:
            raise TransferError(f"s3://{self.bucket}/{kw.get('Key', '')}: {what} failed: {exc}") from exc

    def upload_blob(self, path: Path, digest: str, size: int, moved: Callable[[int], None] = lambda n: None,
                    reused: Callable[[int], None] = lambda n: None) -> bool:
        """Put the file's bytes under its digest; False when they were already there (nothing crossed the link)."""
        key = blob_key(digest)
        if size > self.part_bytes:  # the unfinished uploads are asked for while the blob is: one round trip less
            with ThreadPoolExecutor(1) as ask:
                uploads = ask.submit(self._call, "list uploads", self.client.list_multipart_uploads, Prefix=key)
                present = self.has_blob(digest, size)
                unfinished = uploads.result().get("Uploads", [])
            if present:
                reused(size)
                return False
            self._multipart(path, key, digest, size, moved, reused, unfinished)
            return True
        if self.has_blob(digest, size):
            reused(size)
            return False
        data = path.read_bytes()
        self._check_unchanged(path, data, digest)
        self._call("put", self.client.put_object, Key=key, Body=data, ContentMD5=_md5_b64(data),
                   Metadata={"sha256": digest})
        moved(size)
        return True

    def _check_unchanged(self, path: Path, data: bytes, digest: str) -> None:
        if hashlib.sha256(data).hexdigest() != digest:
            raise TransferError(f"{path}: changed while staging (sha256 no longer {digest})")

    def _open_upload(self, key: str, digest: str,
                     uploads: list[dict[str, Any]]) -> tuple[str, dict[int, tuple[int, str]]]:
        """An unfinished upload of this key among ``uploads`` (resumed: its parts by number) or a new one."""
        for up in uploads:
            if up["Key"] == key:
                parts: dict[int, tuple[int, str]] = {}
                for page in self._pages("list parts", "list_parts", Key=key, UploadId=up["UploadId"]):
                    for p in page.get("Parts", []):
                        parts[p["PartNumber"]] = (p["Size"], p["ETag"].strip('"'))
                return up["UploadId"], parts
        made = self._call("create upload", self.client.create_multipart_upload, Key=key, Metadata={"sha256": digest})
        return made["UploadId"], {}

    def _multipart(self, path: Path, key: str, digest: str, size: int, moved: Callable[[int], None],
                   reused: Callable[[int], None], uploads: list[dict[str, Any]]) -> None:
        part = max(self.part_bytes, -(-size // MAX_PARTS))
        upload_id, have = self._open_upload(key, digest, uploads)
        whole = hashlib.sha256()
        etags: dict[int, str] = {}

        def send(number: int, data: bytes, md5: str) -> tuple[int, str, int]:
            r = self._call("upload part", self.client.upload_part, Key=key, UploadId=upload_id, PartNumber=number,
                           Body=data, ContentMD5=md5)
            return number, r["ETag"].strip('"'), len(data)

        with open(path, "rb") as f, ThreadPoolExecutor(self.workers) as pool:
            pending = []
            number = 0
            while number * part < size:
                number += 1
                data = f.read(part)
                whole.update(data)
                md5 = hashlib.md5(data, usedforsecurity=False)
                if have.get(number) == (len(data), md5.hexdigest()):
                    etags[number] = md5.hexdigest()
                    reused(len(data))
                    continue
                pending.append(pool.submit(send, number, data, base64.b64encode(md5.digest()).decode()))
                if len(pending) >= 2 * self.workers:  # bound the bytes held in memory
                    n, etag, sent = pending.pop(0).result()
                    etags[n] = etag
                    moved(sent)
            for fut in pending:
                n, etag, sent = fut.result()
                etags[n] = etag
                moved(sent)
        if whole.hexdigest() != digest:
            self._call("abort upload", self.client.abort_multipart_upload, Key=key, UploadId=upload_id)
            raise TransferError(f"{path}: changed while staging (sha256 no longer {digest})")
        done = self._call("complete upload", self.client.complete_multipart_upload, Key=key, UploadId=upload_id,
                          MultipartUpload={"Parts": [{"PartNumber": n, "ETag": f'"{etags[n]}"'}
                                                     for n in sorted(etags)]})
        # the store's ETag of a multipart object is the MD5 of its parts' MD5s: the one we expect names exactly
        # the parts we checked, with no round trip; any other (a store that names objects otherwise) is asked
        if done.get("ETag", "").strip('"') != _multipart_etag([etags[n] for n in sorted(etags)]) \
                and not self.has_blob(digest, size):
            raise TransferError(f"s3://{self.bucket}/{key}: not complete after upload")

    def download_blob(self, digest: str, size: int, dest: Path, moved: Callable[[int], None] = lambda n: None,
                      reused: Callable[[int], None] = lambda n: None) -> bool:
        """Bring the blob to dest, verified; False when dest already held exactly these bytes."""
        if dest.is_file() and dest.stat().st_size == size and _sha256_of(dest) == digest:
            reused(size)
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{digest[:16]}.partial")
        have = tmp.stat().st_size if tmp.exists() else 0
        if have > size:
            tmp.unlink()
            have = 0
        whole = hashlib.sha256()
        if have:
            with open(tmp, "rb") as f:
                while chunk := f.read(HASH_BLOCK):
                    whole.update(chunk)
            reused(have)
        with open(tmp, "ab") as out:
            offset = self._stream_into(digest, size, have, out, whole, moved)
            out.flush()
            os.fsync(out.fileno())
        if offset != size or whole.hexdigest() != digest:
            tmp.unlink()  # wrong bytes (or a corrupt prefix from an earlier try): the next run starts from zero
            raise TransferError(f"s3://{self.bucket}/{blob_key(digest)}: content does not match sha256 {digest}")
        os.replace(tmp, dest)
        _fsync_dir(dest.parent)
        return True

    def _stream_into(self, digest: str, size: int, offset: int, out: Any, whole: Any,
                     moved: Callable[[int], None]) -> int:
        """Append bytes offset..size to out in one open-ended ranged GET (no per-chunk round trips); a body
        that breaks off is resumed from where it stopped, ``read_attempts`` times, then TransferError."""
        failures = 0
        while offset < size:
            try:
                body = self._call("get", self.client.get_object, Key=blob_key(digest), Range=f"bytes={offset}-")["Body"]
                while offset < size and (chunk := body.read(min(HASH_BLOCK, size - offset))):
                    out.write(chunk)
                    whole.update(chunk)
                    offset += len(chunk)
                    moved(len(chunk))
                body.close()
                if offset < size:
                    raise TransferError(f"s3://{self.bucket}/{blob_key(digest)}: short read at byte {offset}")
            except Exception as exc:  # a reset mid-body: botocore/urllib3 raise several types
                out.flush()  # what arrived is kept: the next try (or run) starts after it
                failures += 1
                if failures >= self.read_attempts:
                    if isinstance(exc, TransferError):
                        raise
                    raise TransferError(f"s3://{self.bucket}/{blob_key(digest)}: read failed at byte {offset}: "
                                        f"{exc}") from exc
        return offset


def _sha256_of(path: Path) -> str:
    from burstd.data.manifest import sha256_file

    return sha256_file(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
