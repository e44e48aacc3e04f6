"""Trace readers: SWF (Parallel Workloads Archive), the Philly GPU CSV, and ``sacct --parsable2`` exports.

    jobs, info = read_trace("SDSC-BLUE-2000-4.2-cln.swf.gz")      # format from the name, or format="swf"

Every reader returns ``TraceJob``s sorted by submit time (relative seconds from the first submit) and a
``TraceInfo`` with what the header said (machine size). A line that cannot be read raises ``TraceError``
naming the file and line number; nothing is half-read (readers are pure: they only read the file).
"""

from __future__ import annotations

import gzip
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

FORMATS = ("swf", "philly", "sacct")


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: int
    submit: float  # seconds from the trace's first submit
    runtime: float  # seconds the job really ran
    time_limit: float  # seconds asked for (>= runtime)
    cpus: int  # total CPUs (for GPU traces: one per GPU unless known)
    gpus: int = 0  # total GPUs
    user: str = "u0"
    account: str = "a0"
    queue: str = "batch"
    recorded_wait: float | None = None  # seconds the site's own scheduler kept it waiting (SWF field 3, sacct)


@dataclass(frozen=True, slots=True)
class TraceInfo:
    format: str
    max_procs: int | None = None  # SWF header MaxProcs
    max_nodes: int | None = None
    queues: tuple[tuple[int, str], ...] = ()  # SWF header "; Queue: N name" lines (field 15's numbers)
    skipped: int = 0  # records dropped as unusable (zero size or run time), with reasons counted
    skip_reasons: tuple[tuple[str, int], ...] = ()


def _open_text(path: Path) -> io.TextIOBase:
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict")
    return open(path, encoding="utf-8", errors="strict")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    fh = _open_text(path)
    try:
        n = 0
        try:
            for n, line in enumerate(fh, 1):  # noqa: B007
                yield n, line
        except (UnicodeDecodeError, EOFError, gzip.BadGzipFile, OSError) as exc:
            raise TraceError(f"{path}:{n + 1}: not readable text ({exc})") from None
    finally:
        fh.close()


def guess_format(path: str | Path) -> str:
    name = Path(path).name.lower().removesuffix(".gz")
    if name.endswith(".swf"):
        return "swf"
    if "philly" in name or name.endswith(".csv"):
        return "philly"
    if name.endswith((".sacct", ".txt", ".psv")) or "sacct" in name:
        return "sacct"
    raise TraceError(f"{path}: cannot tell the trace format from the name; pass --format swf|philly|sacct")


def read_trace(path: str | Path, format: str | None = None, limit_jobs: int | None = None
               ) -> tuple[list[TraceJob], TraceInfo]:
    path = Path(path)
    fmt = format or guess_format(path)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    reader = {"swf": read_swf, "philly": read_philly, "sacct": read_sacct}[fmt]
    jobs, info = reader(path, limit_jobs)
    _check_jobs(path, jobs, info)
    return jobs, info


MAX_JOB_CPUS = 10_000_000  # beyond any machine: a typo or a corrupt record, never silently dropped


def _check_jobs(path: Path, jobs: list[TraceJob], info: TraceInfo) -> None:
    """What the readers accept line by line but a simulation cannot: no jobs, one id twice, absurd sizes."""
    if not jobs:
        raise TraceError(f"{path}: no jobs to simulate ({info.skipped} record(s) skipped)")
    seen: set[int] = set()
    for j in jobs:
        if j.job_id in seen:
            raise TraceError(f"{path}: job id {j.job_id} appears more than once")
        seen.add(j.job_id)
        if not 0 < j.cpus <= MAX_JOB_CPUS or not 0 <= j.gpus <= MAX_JOB_CPUS:
            raise TraceError(f"{path}: job {j.job_id} asks for {j.cpus} CPUs and {j.gpus} GPUs "
                             f"(at most {MAX_JOB_CPUS:,} each)")


class _Skips:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, why: str) -> None:
        self.counts[why] = self.counts.get(why, 0) + 1

    def info(self, fmt: str, **kw) -> TraceInfo:
        return TraceInfo(fmt, skipped=sum(self.counts.values()), skip_reasons=tuple(sorted(self.counts.items())), **kw)


def _finish(jobs: list[TraceJob], limit_jobs: int | None) -> list[TraceJob]:
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    if limit_jobs is not None:
        jobs = jobs[:limit_jobs]
    if jobs:
        t0 = jobs[0].submit
        if t0:
            jobs = [replace(j, submit=j.submit - t0) for j in jobs]
    return jobs


def _num(path: Path, n: int, field: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise TraceError(f"{path}:{n}: field {field} is not a number: {text!r}") from None
    if not math.isfinite(v):
        raise TraceError(f"{path}:{n}: field {field} is not finite: {text!r}")
    return v


def read_swf(path: Path, limit_jobs: int | None = None) -> tuple[list[TraceJob], TraceInfo]:
    """Standard Workload Format: ';' header lines, then 18 whitespace-separated fields a job."""
    names = ("job id", "submit time", "wait", "run time", "allocated procs", "avg cpu", "used memory",
             "requested procs", "requested time", "requested memory", "status", "user", "group", "executable",
             "queue", "partition", "preceding job", "think time")
    max_procs = max_nodes = None
    queues: list[tuple[int, str]] = []
    jobs: list[TraceJob] = []
    skips = _Skips()
    for n, line in _lines(path):
        s = line.strip()
        if not s:
            continue
        if s.startswith(";"):
            m = re.match(r";\s*(MaxProcs|MaxNodes):\s*(\d+)", s)
            if m:
                if m.group(1) == "MaxProcs":
                    max_procs = int(m.group(2))
                else:
                    max_nodes = int(m.group(2))
            q = re.match(r";\s*Queue:\s*(\d+)\s+(\S+)", s)
            if q:
                queues.append((int(q.group(1)), q.group(2)))
            continue
        parts = s.split()
        if len(parts) != 18:
            raise TraceError(f"{path}:{n}: an SWF record has 18 fields, this line has {len(parts)}: {s[:80]!r}")
        try:
            v = [float(x) for x in parts]
        except ValueError:
            v = [_num(path, n, names[i], parts[i]) for i in range(18)]
        if not all(map(math.isfinite, v)):
            bad = next(i for i in range(18) if not math.isfinite(v[i]))
            raise TraceError(f"{path}:{n}: field {names[bad]} is not finite: {parts[bad]!r}")
        procs = int(v[4]) if v[4] > 0 else int(v[7])
        run = v[3]
        if procs <= 0:
            skips.add("no processor count")
            continue
        if run <= 0:
            skips.add("no run time")
            continue
        req = v[8] if v[8] > 0 else run
        jobs.append(TraceJob(int(v[0]), v[1], run, max(req, run), procs, 0,
                             f"u{int(v[11])}", f"g{int(v[12])}" if v[12] >= 0 else f"u{int(v[11])}",
                             f"q{int(v[14])}", v[2] if v[2] >= 0 else None))
        if limit_jobs is not None and len(jobs) >= limit_jobs:
            break
    return _finish(jobs, limit_jobs), skips.info("swf", max_procs=max_procs, max_nodes=max_nodes,
                                                       queues=tuple(queues))


def read_philly(path: Path, limit_jobs: int | None = None) -> tuple[list[TraceJob], TraceInfo]:
    """The RFold Philly CSV: job id, arrival time (s), topology, shape, size (GPUs), duration (s)."""
    jobs: list[TraceJob] = []
    skips = _Skips()
    for n, line in _lines(path):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        row = s.split(",")
        if len(row) != 6:
            raise TraceError(f"{path}:{n}: a Philly record has 6 comma-separated fields, this line has "
                             f"{len(row)}: {s[:80]!r}")
        jid = _num(path, n, "job id", row[0])
        arrival = _num(path, n, "arrival time", row[1])
        size = _num(path, n, "size", row[4])
        dur = _num(path, n, "duration", row[5])
        if size <= 0:
            skips.add("no GPUs")
            continue
        if dur <= 0:
            skips.add("no duration")
            continue
        g = int(size)
        jobs.append(TraceJob(int(jid), arrival, dur, dur, g, g, f"u{int(jid) % 97}", f"vc{int(jid) % 11}", "batch"))
        if limit_jobs is not None and len(jobs) >= limit_jobs:
            break
    return _finish(jobs, limit_jobs), skips.info("philly")


_SACCT_TIME = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")


def _slurm_duration(path: Path, n: int, field: str, text: str) -> float | None:
    t = text.strip()
    if t in ("", "UNLIMITED", "Partition_Limit", "INVALID"):
        return None
    m = _SACCT_TIME.match(t)
    if not m:
        raise TraceError(f"{path}:{n}: {field} is not a Slurm duration ([D-]HH:MM:SS): {text!r}")
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    if m.group(2) is None:  # MM:SS
        return d * 86400 + mi * 60 + s
    return d * 86400 + h * 3600 + mi * 60 + s


def _slurm_time(path: Path, n: int, field: str, text: str) -> float | None:
    from datetime import datetime, timezone

    t = text.strip()
    if t in ("", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(t).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise TraceError(f"{path}:{n}: {field} is not a Slurm time (YYYY-MM-DDTHH:MM:SS): {text!r}") from None


def _gpus_from_tres(tres: str) -> int:
    for part in tres.split(","):
        k, _, v = part.partition("=")
        if k == "gres/gpu" and v.isdigit():
            return int(v)
    return 0


def read_sacct(path: Path, limit_jobs: int | None = None) -> tuple[list[TraceJob], TraceInfo]:
    """``sacct --parsable2 --allocations -o JobID,User,Account,Partition,Submit,Start,End,Elapsed,Timelimit,
    NCPUS,NNodes,AllocTRES,State`` (any column order; header line first). Steps (``123.batch``) are skipped."""
    need = {"JobID", "Submit", "Elapsed", "Timelimit", "NCPUS"}
    header: list[str] | None = None
    jobs: list[TraceJob] = []
    skips = _Skips()
    for n, line in _lines(path):
        s = line.rstrip("\n")
        if not s.strip():
            continue
        row = s.split("|")
        if header is None:
            header = row
            missing = need - set(header)
            if missing:
                raise TraceError(f"{path}:{n}: sacct header lacks {', '.join(sorted(missing))} "
                                 f"(export with --parsable2 and -o {','.join(sorted(need))},...)")
            continue
        if len(row) != len(header):
            raise TraceError(f"{path}:{n}: {len(row)} fields, the header has {len(header)}: {s[:80]!r}")
        rec = dict(zip(header, row))
        jid = rec["JobID"]
        if "." in jid:
            continue
        m = re.match(r"^(\d+)(?:_(\d+))?(?:\+\d+)?$", jid)
        if not m:
            if re.match(r"^\d+_\[", jid):
                skips.add("pending array record")
                continue
            raise TraceError(f"{path}:{n}: JobID is not a Slurm job id: {jid!r}")
        submit = _slurm_time(path, n, "Submit", rec["Submit"])
        start = _slurm_time(path, n, "Start", rec["Start"]) if "Start" in rec else None
        elapsed = _slurm_duration(path, n, "Elapsed", rec["Elapsed"])
        limit = _slurm_duration(path, n, "Timelimit", rec["Timelimit"])
        cpus = int(_num(path, n, "NCPUS", rec["NCPUS"]))
        if submit is None or not elapsed:
            skips.add("never ran")
            continue
        if cpus <= 0:
            skips.add("no CPUs")
            continue
        gpus = _gpus_from_tres(rec.get("AllocTRES", ""))
        jobid = int(m.group(1)) * 100_000 + int(m.group(2) or 0) if m.group(2) else int(m.group(1))
        jobs.append(TraceJob(jobid, submit, elapsed, max(limit or elapsed, elapsed), cpus, gpus,
                             rec.get("User", "") or "u0", rec.get("Account", "") or "a0",
                             (rec.get("Partition", "") or "batch").split(",")[0],
                             start - submit if start is not None and start >= submit else None))
        if limit_jobs is not None and len(jobs) >= limit_jobs:
            break
    if header is None:
        raise TraceError(f"{path}: empty sacct export (no header line)")
    return _finish(jobs, limit_jobs), skips.info("sacct")


__all__ = ["TraceJob", "TraceInfo", "TraceError", "read_trace", "read_swf", "read_philly", "read_sacct",
           "guess_format", "FORMATS"]
