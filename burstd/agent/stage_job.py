"""A cloud node's Slurm Prolog: a burst job's declared inputs onto the node, at the paths the job declared.

    Prolog=/usr/local/sbin/burstd-prolog    # runs: burstd-agent stage-in --job $SLURM_JOB_ID

The agent asks the daemon (``GET /v1/stage-in/JOB``, with the node's agent token: the daemon answers only for a
job the node holds) for the job's staged datasets and the pool's store, waits while the head is still pushing
them, then pulls each one with ``burstd-agent stage-in --dataset`` (``burstd.data.cli``) **as the job's user**
(``SLURM_JOB_UID``/``SLURM_JOB_GID``): the files are the user's, and a declared path cannot overwrite a file the
user could not write. Missing parent folders are made first (owned by the user; existing ones are left alone).
Exit 0: every input in place, verified (or the job declared none); 1: not staged (Slurm requeues the job and
drains the node: a prolog failure); 2: bad input.

The daemon's answer is outside input: ``parse_staging`` checks every field (fuzzed in
tests/adversarial/test_fuzz_stage_job.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from burstd.agent.report import DaemonUnreachable, _client
from burstd.data.manifest import SHA256_HEX

STAGE_PATH = "/v1/stage-in/"


class StagedInput(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    path: str = Field(max_length=4096)
    dataset: str

    @field_validator("path")
    @classmethod
    def _absolute_plain(cls, p: str) -> str:
        parts = PurePosixPath(p).parts
        if not p.startswith("/") or "\x00" in p or ".." in parts or p.rstrip("/") == "" or "//" in p:
            raise ValueError(f"{p!r} is not an absolute path without '..'")
        return p

    @field_validator("dataset")
    @classmethod
    def _digest(cls, d: str) -> str:
        if not SHA256_HEX.fullmatch(d):
            raise ValueError(f"{d!r} is not a sha256 digest")
        return d


class Staging(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    job_id: int = Field(ge=1, le=4_294_967_294)
    state: Literal["queued", "running", "done", "failed"]
    error: str = Field(default="", max_length=4096)
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    endpoint: str | None = Field(default=None, pattern=r"^https?://[A-Za-z0-9.\-\[\]:]+/?$")
    region: str | None = Field(default=None, pattern=r"^[a-z0-9-]{1,32}$")
    inputs: list[StagedInput] = Field(default=[], max_length=256)


def parse_staging(raw: bytes, job_id: int) -> Staging:
    """The daemon's answer, checked (ValueError naming the field)."""
    try:
        staging = Staging.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"the daemon's {STAGE_PATH}{job_id} answer: {exc}") from None
    if staging.job_id != job_id:
        raise ValueError(f"the daemon's {STAGE_PATH}{job_id} answer is for job {staging.job_id}")
    if staging.state == "done" and staging.inputs and staging.bucket is None:
        raise ValueError(f"the daemon's {STAGE_PATH}{job_id} answer names no bucket")
    return staging


def fetch_staging(daemon_url: str, job_id: int, *, token_file: str | None = None, ca_file: str | None = None,
                  timeout_s: float = 10.0) -> Staging | None:
    """The job's staging as the daemon knows it; None: the daemon staged nothing for it (404)."""
    try:
        client, base = _client(daemon_url, token_file, timeout_s, ca_file)
        with client:
            r = client.get(f"{base}{STAGE_PATH}{job_id}")
    except (httpx.HTTPError, OSError) as exc:
        raise DaemonUnreachable(f"daemon unreachable at {daemon_url}: {exc}") from None
    if r.status_code == 404:
        return None
    if r.status_code != 200:
        raise DaemonUnreachable(f"daemon answered {r.status_code} for {STAGE_PATH}{job_id}: {r.text[:200]}")
    return parse_staging(r.content, job_id)


def make_parents(dest: Path, uid: int, gid: int) -> None:
    """Create dest's missing parent folders owned by the job's user (folders already there stay as they are)."""
    missing = [p for p in reversed(dest.parents) if not p.exists()]
    for p in missing:
        p.mkdir(mode=0o755)
        os.chown(p, uid, gid)


def pull_as_user(staging: Staging, uid: int, gid: int, progress_dir: Path | None) -> None:
    """Each input to its declared path, by ``burstd-agent stage-in --dataset`` run as uid/gid (raises on failure)."""
    for i, item in enumerate(staging.inputs):
        dest = Path(item.path)
        make_parents(dest, uid, gid)
        cmd = [sys.executable, "-m", "burstd.data", "stage-in", "--bucket", str(staging.bucket),
               "--dataset", item.dataset, "--dest", str(dest)]
        cmd += ["--endpoint-url", staging.endpoint] if staging.endpoint else []
        cmd += ["--region", staging.region] if staging.region else []
        if progress_dir is not None:
            cmd += ["--progress", str(progress_dir / f"{staging.job_id}-in-{i}.json")]
        as_user = os.getuid() == 0 and uid != 0
        out = subprocess.run(cmd, capture_output=True, text=True, check=False,
                             user=uid if as_user else None, group=gid if as_user else None,
                             extra_groups=[] if as_user else None)
        if out.returncode != 0:
            raise RuntimeError(f"{item.path}: stage-in exited {out.returncode}: {out.stderr.strip()[-500:]}")


def stage_job(daemon_url: str, job_id: int, uid: int, gid: int, *, token_file: str | None = None,
              ca_file: str | None = None, wait_s: float = 3600.0, poll_s: float = 2.0,
              progress_dir: Path | None = None) -> int:
    """Wait for the head's push, then pull; the number of inputs staged (0: the job declared none)."""
    deadline = time.monotonic() + wait_s
    while True:
        staging = fetch_staging(daemon_url, job_id, token_file=token_file, ca_file=ca_file)
        if staging is None:
            return 0
        if staging.state == "failed":
            raise RuntimeError(f"job {job_id}: the head could not stage its inputs: {staging.error}")
        if staging.state == "done":
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id}: inputs still {staging.state} on the head after {wait_s:.0f} s")
        time.sleep(poll_s)
    if progress_dir is not None:
        progress_dir.mkdir(parents=True, exist_ok=True)
    pull_as_user(staging, uid, gid, progress_dir)
    return len(staging.inputs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="burstd-agent stage-in", description="Slurm Prolog: a burst job's declared "
                                 "inputs onto this node, as the job's user")
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--daemon-url", required=True, help="unix:/path or https://host:port")
    ap.add_argument("--token-file", help="the node's agent token")
    ap.add_argument("--ca-file")
    ap.add_argument("--uid", type=int, default=os.environ.get("SLURM_JOB_UID"))
    ap.add_argument("--gid", type=int, default=os.environ.get("SLURM_JOB_GID"))
    ap.add_argument("--wait-s", type=float, default=3600.0)
    ap.add_argument("--progress-dir", type=Path, default=Path("/run/burstd/staging"))
    args = ap.parse_args(argv)
    if args.uid is None or args.gid is None:
        print("burstd-agent stage-in: --uid/--gid (or SLURM_JOB_UID/SLURM_JOB_GID) required", file=sys.stderr)
        return 2
    try:
        n = stage_job(args.daemon_url, args.job, int(args.uid), int(args.gid), token_file=args.token_file,
                      ca_file=args.ca_file, wait_s=args.wait_s, progress_dir=args.progress_dir)
    except ValueError as exc:
        print(f"burstd-agent stage-in: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, DaemonUnreachable, OSError) as exc:
        print(f"burstd-agent stage-in: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"job_id": args.job, "inputs": n}))
    return 0
