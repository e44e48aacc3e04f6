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
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from burstd.agent.report import DaemonUnreachable, get_from_daemon
from burstd.data.manifest import SHA256_HEX
from burstd.domain.data import UNDECLARED_NOTICE

STAGE_PATH = "/v1/stage-in/"
STAGING_DIR = Path("/run/burstd/staging")  # progress records, and the marker of a job that declared nothing


def _plain_absolute(p: str) -> str:
    if not p.startswith("/") or "\x00" in p or ".." in PurePosixPath(p).parts or p.rstrip("/") == "" or "//" in p:
        raise ValueError(f"{p!r} is not an absolute path without '..'")
    return p


class StagedInput(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    path: str = Field(max_length=4096)
    dataset: str

    @field_validator("path")
    @classmethod
    def _absolute_plain(cls, p: str) -> str:
        return _plain_absolute(p)

    @field_validator("dataset")
    @classmethod
    def _digest(cls, d: str) -> str:
        if not SHA256_HEX.fullmatch(d):
            raise ValueError(f"{d!r} is not a sha256 digest")
        return d


class DeclaredOutput(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    path: str = Field(max_length=4096)
    label: str = Field(pattern=r"^out-[0-9]{1,3}$")

    @field_validator("path")
    @classmethod
    def _absolute_plain(cls, p: str) -> str:
        return _plain_absolute(p)


class Staging(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    job_id: int = Field(ge=1, le=4_294_967_294)
    state: Literal["queued", "running", "done", "failed"]
    error: str = Field(default="", max_length=4096)
    bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    endpoint: str | None = Field(default=None, pattern=r"^https?://[A-Za-z0-9.\-\[\]:]+/?$")
    region: str | None = Field(default=None, pattern=r"^[a-z0-9-]{1,32}$")
    inputs: list[StagedInput] = Field(default=[], max_length=256)
    outputs: list[DeclaredOutput] = Field(default=[], max_length=256)


def parse_staging(raw: bytes, job_id: int) -> Staging:
    """The daemon's answer, checked (ValueError naming the field)."""
    try:
        staging = Staging.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"the daemon's {STAGE_PATH}{job_id} answer: {exc}") from None
    if staging.job_id != job_id:
        raise ValueError(f"the daemon's {STAGE_PATH}{job_id} answer is for job {staging.job_id}")
    if (staging.inputs or staging.outputs) and staging.bucket is None:
        raise ValueError(f"the daemon's {STAGE_PATH}{job_id} answer names no bucket")
    return staging


def fetch_staging(daemon_url: str, job_id: int, *, token_file: str | None = None, ca_file: str | None = None,
                  timeout_s: float = 10.0) -> Staging | None:
    """The job's staging as the daemon knows it; None: the daemon staged nothing for it (404)."""
    r = get_from_daemon(daemon_url, f"{STAGE_PATH}{job_id}", token_file=token_file, ca_file=ca_file,
                        timeout_s=timeout_s)
    return None if r is None else parse_staging(r.content, job_id)


def make_parents(dest: Path, uid: int, gid: int) -> None:
    """Create dest's missing parent folders owned by the job's user (folders already there stay as they are)."""
    missing = [p for p in reversed(dest.parents) if not p.exists()]
    for p in missing:
        p.mkdir(mode=0o755)
        os.chown(p, uid, gid)


def _as_user(cmd: list[str], uid: int, gid: int, what: str) -> None:
    as_user = os.getuid() == 0 and uid != 0
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, user=uid if as_user else None,
                         group=gid if as_user else None, extra_groups=[] if as_user else None)
    if out.returncode != 0:
        raise RuntimeError(f"{what}: {cmd[3]} exited {out.returncode}: {out.stderr.strip()[-500:]}")


def _store_flags(staging: Staging) -> list[str]:
    return (["--bucket", str(staging.bucket)] + (["--endpoint-url", staging.endpoint] if staging.endpoint else [])
            + (["--region", staging.region] if staging.region else []))


def publish_as_user(staging: Staging, uid: int, gid: int) -> int:
    """The Epilog: each declared output the job wrote to the store, read as the job's user; the count published.
    An output the job did not write is skipped (the head then reports it missing)."""
    n = 0
    for out in staging.outputs:
        if not os.path.lexists(out.path):
            print(f"burstd-agent stage-out: {out.path}: the job wrote nothing there", file=sys.stderr)
            continue
        _as_user([sys.executable, "-m", "burstd.data", "stage-out", *_store_flags(staging), "--job",
                  str(staging.job_id), "--label", out.label, "--src", out.path], uid, gid, out.path)
        n += 1
    return n


def pull_as_user(staging: Staging, uid: int, gid: int, progress_dir: Path | None) -> None:
    """Each input to its declared path, by ``burstd-agent stage-in --dataset`` run as uid/gid (raises on failure)."""
    job_dir = None
    if progress_dir is not None:  # the user's process writes its progress records (temporary file, rename): its own
        job_dir = progress_dir / str(staging.job_id)
        job_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        if os.getuid() == 0:
            os.chown(job_dir, uid, gid)
    for i, item in enumerate(staging.inputs):
        dest = Path(item.path)
        make_parents(dest, uid, gid)
        cmd = [sys.executable, "-m", "burstd.data", "stage-in", *_store_flags(staging),
               "--dataset", item.dataset, "--dest", str(dest)]
        if job_dir is not None:
            cmd += ["--progress", str(job_dir / f"in-{i}.json")]
        _as_user(cmd, uid, gid, item.path)


def stage_job(daemon_url: str, job_id: int, uid: int, gid: int, *, token_file: str | None = None,
              ca_file: str | None = None, wait_s: float = 3600.0, poll_s: float = 2.0,
              progress_dir: Path | None = None) -> int:
    """Wait for the head's push, then pull; the number of inputs staged (0: the job declared none)."""
    deadline = time.monotonic() + wait_s
    while True:
        staging = fetch_staging(daemon_url, job_id, token_file=token_file, ca_file=ca_file)
        if staging is None:
            if progress_dir is not None:  # the TaskProlog tells the job (task_prolog_notice)
                progress_dir.mkdir(parents=True, exist_ok=True)
                (progress_dir / f"{job_id}.undeclared").touch()
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


def task_prolog_notice(env: dict[str, str] | os._Environ[str], progress_dir: Path) -> list[str]:
    """The TaskProlog's ``print`` lines (shown in the job's own output) when the prolog found that this burst job
    declared no data: its on-prem paths do not exist on this node."""
    job = env.get("SLURM_JOB_ID", "")
    if not job.isdigit() or not (progress_dir / f"{job}.undeclared").exists():
        return []
    return [f"print burstd: {UNDECLARED_NOTICE}"]


def stage_out_job(daemon_url: str, job_id: int, uid: int, gid: int, *, token_file: str | None = None,
                  ca_file: str | None = None) -> int:
    """The Epilog: the job's declared outputs to the store (the head brings them home); the count published."""
    staging = fetch_staging(daemon_url, job_id, token_file=token_file, ca_file=ca_file)
    return 0 if staging is None else publish_as_user(staging, uid, gid)


def main(argv: list[str] | None = None, command: str = "stage-in") -> int:
    ap = argparse.ArgumentParser(prog=f"burstd-agent {command}", description="Slurm Prolog (stage-in) / Epilog "
                                 "(stage-out): a burst job's declared data onto / off this node, as its user")
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--daemon-url", required=True, help="unix:/path or https://host:port")
    ap.add_argument("--token-file", help="the node's agent token")
    ap.add_argument("--ca-file")
    ap.add_argument("--uid", type=int, default=os.environ.get("SLURM_JOB_UID"))
    ap.add_argument("--gid", type=int, default=os.environ.get("SLURM_JOB_GID"))
    ap.add_argument("--wait-s", type=float, default=3600.0)
    ap.add_argument("--progress-dir", type=Path, default=STAGING_DIR)
    args = ap.parse_args(argv)
    if args.uid is not None and args.gid is None:  # a Slurm whose prolog has no SLURM_JOB_GID: the user's own group
        import pwd

        with contextlib.suppress(KeyError, ValueError):
            args.gid = pwd.getpwuid(int(args.uid)).pw_gid
    if args.uid is None or args.gid is None:
        print(f"burstd-agent {command}: --uid/--gid (or SLURM_JOB_UID/SLURM_JOB_GID) required", file=sys.stderr)
        return 2
    try:
        if command == "stage-out":
            n = stage_out_job(args.daemon_url, args.job, int(args.uid), int(args.gid), token_file=args.token_file,
                              ca_file=args.ca_file)
        else:
            n = stage_job(args.daemon_url, args.job, int(args.uid), int(args.gid), token_file=args.token_file,
                          ca_file=args.ca_file, wait_s=args.wait_s, progress_dir=args.progress_dir)
    except ValueError as exc:
        print(f"burstd-agent {command}: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, DaemonUnreachable, OSError) as exc:
        print(f"burstd-agent {command}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"job_id": args.job, "inputs" if command == "stage-in" else "outputs": n}))
    return 0
