"""Read saved Slurm output (files) into a Snapshot: what support uses to replay a site's captured state.

Accepted, in any mix: JSON from ``squeue --json`` (any version, ``-t all`` too), ``sinfo --json``,
``scontrol show jobs|nodes|partitions --json``, slurmrestd ``/jobs``, ``/nodes``, ``/partitions``,
``/job/N``, ``/node/X`` (v0.0.36 .. v0.0.45); and two text forms for Slurm 22.05, which has no
``scontrol --json``: ``scontrol show partitions -o`` and the cli backend's own ``squeue -O`` text.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from burstd.domain.slurm import Snapshot
from burstd.slurm import parse, squeue_text
from burstd.slurm.base import SlurmError


def load_file(path: str | Path) -> dict[str, Any]:
    """One saved file as a document ``snapshot_from_docs`` understands."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise SlurmError(f"{p}: cannot read: {exc.strerror}") from None
    body = parse.decode_output(raw)
    if body.lstrip().startswith("{"):
        doc = parse.load_json(body, str(p))
        if not any(k in doc for k in ("jobs", "nodes", "sinfo", "partitions")):
            raise SlurmError(f"{p}: JSON without jobs, nodes, sinfo or partitions (not squeue/sinfo/scontrol output)")
        return doc
    if body.startswith("PartitionName="):
        return {"_partitions_text": parse.partitions_from_scontrol_text(body)}
    if squeue_text.RECORD_END in body:
        # a capture may carry the record nonce it was taken with: whatever follows the last RS
        nonce = body[body.rindex(squeue_text.RECORD_END) + 1 :].rstrip("\n")
        try:
            return {"_jobs_text": squeue_text.jobs_from_squeue_text(body, nonce=nonce if nonce.isalnum() else "")}
        except squeue_text.TextParseError as exc:
            raise SlurmError(f"{p}: {exc}") from None
    raise SlurmError(
        f"{p}: not a Slurm JSON document, `scontrol show partitions -o` output, or burstd's squeue text format"
    )


def snapshot_from_files(paths: Iterable[str | Path], *, active_only: bool = True) -> Snapshot:
    files = [Path(p) for p in paths]
    if not files:
        raise SlurmError("no files given")
    docs: list[tuple[str, dict[str, Any]]] = []
    extra_jobs, extra_parts = [], []
    for p in files:
        doc = load_file(p)
        if "_partitions_text" in doc:
            extra_parts.extend(doc["_partitions_text"])
        elif "_jobs_text" in doc:
            extra_jobs.extend(doc["_jobs_text"])
        else:
            docs.append((str(p), doc))
    snap = parse.snapshot_from_docs(docs, taken_at=time.time(), source=",".join(p.name for p in files),
                                   active_only=False)
    jobs = {j.job_id: j for j in snap.jobs}
    jobs.update({j.job_id: j for j in extra_jobs})
    job_list = sorted(jobs.values(), key=lambda j: j.job_id)
    if active_only:
        job_list = [j for j in job_list if j.is_active]
    parts = {p.name: p for p in snap.partitions}
    if extra_parts:
        parts = {p.name: p for p in extra_parts}
    return Snapshot(
        taken_at=snap.taken_at,
        jobs=tuple(job_list),
        nodes=snap.nodes,
        partitions=tuple(parts.values()),
        slurm_version=snap.slurm_version,
        source=snap.source,
    )
