"""Training progress a job reports about itself: steps, step time, GPU use, and what a step costs.

A job using ``burstd.train`` seals a :class:`ProgressReport` in a MUNGE credential (``job_credentials``) and posts
it to ``POST /v1/jobs/<id>/progress`` (``burstd.api.routers.progress``). burstd believes it only about that job, and only when

* the credential's uid is the job's owner (a user cannot report on someone else's job), and
* it was made on one of the nodes the job runs on now (a user's job cannot report on the same user's other jobs,
  unless they share a node), and the job is running in the last snapshot, or, for a job that started after it,
  in Slurm now (``JustStarted``: a training job's first report comes seconds after its start).

The report changes nothing but the job's own progress record: no lease, no spend, no decision reads it as fact
about anything else. ``cost per step`` is burstd's: the hourly price of the leases under the job's cloud nodes
times the reported step time; an on-prem run has none.

    book = ProgressBook()
    progress = book.record(judge(caller, report, job, nodes, uid_of), report, now, price_per_hour_micros)
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from burstd.daemon.job_credentials import JobCaller
from burstd.daemon.logging import ev, get_logger
from burstd.domain.jobref import MAX_JOB_ID
from burstd.domain.slurm import Job, Node

log = get_logger("job_progress")

MAX_REPORT_BYTES = 4096
MAX_JOBS_KEPT = 10_000  # progress of this many jobs at most (the oldest report goes first)

Finite = Annotated[float, Field(allow_inf_nan=False)]


class ProgressReport(BaseModel):
    """What a job says about itself (sealed in its MUNGE credential; JSON)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    v: Literal[1] = 1
    job: int = Field(ge=1, le=MAX_JOB_ID)
    step: int = Field(ge=0, le=10**15)  # steps done (the resumed count included)
    step_time_s: Finite = Field(gt=0, le=86_400)  # mean seconds a step over the last interval
    gpu_util: list[Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]] | None = Field(default=None,
                                                                                             max_length=64)
    steps_per_epoch: int | None = Field(default=None, ge=1, le=10**12)


class ReportRefused(Exception):
    """Not a report burstd takes: the message says why (it goes back to the job as a 403 or 422)."""


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_report(payload: bytes) -> ProgressReport:
    """The sealed payload -> ProgressReport, or ValueError saying what is wrong (never echoing the payload)."""
    if len(payload) > MAX_REPORT_BYTES:
        raise ValueError(f"a progress report is at most {MAX_REPORT_BYTES} bytes")
    try:
        data = json.loads(payload.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"a progress report is one JSON object ({exc.__class__.__name__})") from None
    try:
        return ProgressReport.model_validate(data)
    except ValidationError as exc:
        # field names as ascii() writes them, shortened: a key is the job's text, never echoed raw
        fields = ", ".join(".".join(ascii(p)[:40] for p in e["loc"]) or "(report)" for e in exc.errors()[:5])
        raise ValueError(f"progress report: bad, missing or unknown {fields}") from None


def judge(caller: JobCaller, report: ProgressReport, job_id: int, job: Job | None, nodes: Iterable[Node],
          uid_of: Callable[[str], int | None], require_node: bool = True) -> Job:
    """The job this report may speak for, or ReportRefused (see the module doc). ``nodes``: the job's nodes as
    Slurm lists them (their names, hostnames and addresses are where a credential may come from; not checked
    when ``require_node`` is false: ``api.progress_require_node``)."""
    if report.job != job_id:
        raise ReportRefused(f"the sealed report is about job {report.job}, not job {job_id}")
    if job is None or not job.is_running:
        raise ReportRefused(f"job {job_id} is not running in burstd's last snapshot")
    owner = uid_of(job.user)
    if owner is None or owner != caller.uid:
        raise ReportRefused(f"uid {caller.uid} does not own job {job_id}")
    places = {x for n in nodes for x in (n.name, n.hostname, n.address) if x}
    if require_node and caller.host not in places:
        raise ReportRefused(f"the credential was made on {caller.host}, not on a node of job {job_id}")
    return job


class JustStarted:
    """Jobs that are not running in the last snapshot, read from Slurm when they report (``squeue -j``): a job
    that started after the snapshot sends its first report before the next cycle sees it running (seconds, or
    a cycle's length on a loaded head node), and refusing it would tell a healthy job that burstd rejects it.

    One read a job a snapshot, whoever asks, and at most ``MAX_READS`` a snapshot: a caller with a MUNGE
    credential (any cluster user) cannot make burstd ask Slurm more often than that by reporting on job ids that
    are not running."""

    MAX_READS = 256

    def __init__(self, read: Callable[[Sequence[int]], list[Job]]):
        self._read = read
        self._lock = threading.Lock()
        self._snapshot: object = None
        self._seen: dict[int, Job | None] = {}

    def job(self, job_id: int, snapshot: object) -> Job | None:
        """The job as Slurm has it now, read once for ``snapshot`` (None: gone, unreadable, or over the cap)."""
        with self._lock:
            if self._snapshot is not snapshot:  # a new cycle's snapshot: it answers for what started before it
                self._snapshot, self._seen = snapshot, {}
            if job_id in self._seen or len(self._seen) >= self.MAX_READS:
                return self._seen.get(job_id)
            self._seen[job_id] = None  # taken: a second report in flight reads nothing more
        try:
            job = next((j for j in self._read([job_id]) if j.job_id == job_id), None)
        except Exception as exc:  # noqa: BLE001 - Slurm unreachable: the report is refused as before, not failed
            log.warning("job not readable from Slurm", extra=ev(job_id=job_id, error=str(exc)[:200]))
            job = None
        with self._lock:
            if self._snapshot is snapshot:
                self._seen[job_id] = job
        return job


@dataclass(slots=True)
class JobProgress:
    job_id: int
    account: str
    user: str
    side: str  # "cloud" (some of its nodes are burstd's) or "onprem"
    nodes: str
    step: int
    step_time_s: float
    gpu_util: float | None  # mean over the job's GPUs on the reporting node, 0-100
    steps_per_epoch: int | None
    price_per_hour_micros: int  # of the cloud leases under the job now (0 on-prem)
    reported_at: float
    first_reported_at: float
    reports: int = 1

    @property
    def cost_per_step_micros(self) -> float | None:
        if self.side != "cloud":
            return None
        return self.price_per_hour_micros * self.step_time_s / 3600.0

    @property
    def cost_per_epoch_micros(self) -> float | None:
        per_step = self.cost_per_step_micros
        return None if per_step is None or self.steps_per_epoch is None else per_step * self.steps_per_epoch

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cost_per_step_micro_usd"] = self.cost_per_step_micros
        out["cost_per_epoch_micro_usd"] = self.cost_per_epoch_micros
        return out


@runtime_checkable
class ProgressStore(Protocol):
    """Where the book keeps its records (``burstd.db.progress_records``; the Store has it)."""

    def save_progress(self, job_id: int, record: str, *, at: float | None = None) -> None: ...

    def progress_records(self, limit: int) -> list[str]: ...


def _from_record(record: str) -> JobProgress | None:
    """A stored record back, or None for one this burstd cannot read (written by another version, or edited)."""
    try:
        data = json.loads(record)
        progress = JobProgress(**{f: data[f] for f in JobProgress.__dataclass_fields__})
    except (ValueError, TypeError, KeyError):
        return None
    return progress if isinstance(progress.job_id, int) and isinstance(progress.step, int) else None


class ProgressBook:
    """The latest report of each job, in memory and, with a ``store``, in the database: a restarted daemon starts
    from what the jobs last reported. At most ``MAX_JOBS_KEPT`` jobs: the one that reported longest ago goes
    first."""

    def __init__(self, limit: int = MAX_JOBS_KEPT, store: ProgressStore | None = None):
        self.limit = limit
        self._store = store
        self._jobs: dict[int, JobProgress] = {}
        self.current = True  # False while another daemon leads: the jobs may be reporting to it
        self.reload()

    def reload(self) -> None:
        """The newest records from the store (every daemon sharing it saves each report it takes): at start, and
        when a standby takes over. Without a store, nothing changes."""
        if self._store is not None:
            jobs = (_from_record(record) for record in self._store.progress_records(self.limit))
            self._jobs = {p.job_id: p for p in jobs if p is not None}
        self.current = True

    def record(self, job: Job, report: ProgressReport, now: float, price_per_hour_micros: int,
               on_cloud: bool) -> JobProgress:
        before = self._jobs.pop(job.job_id, None)
        util = report.gpu_util
        progress = JobProgress(
            job.job_id, job.account, job.user, "cloud" if on_cloud else "onprem", job.nodes, report.step,
            report.step_time_s, sum(util) / len(util) if util else None, report.steps_per_epoch,
            price_per_hour_micros if on_cloud else 0, now, before.first_reported_at if before else now,
            before.reports + 1 if before else 1)
        self._jobs[job.job_id] = progress  # last in: the newest
        while len(self._jobs) > self.limit:
            del self._jobs[next(iter(self._jobs))]
        if self._store is not None:
            try:
                self._store.save_progress(job.job_id, json.dumps(asdict(progress)), at=now)
            except Exception as exc:  # noqa: BLE001 - a busy database costs the copy, never the report
                log.warning("progress report kept in memory only", extra=ev(job_id=job.job_id, error=str(exc)))
        return progress

    def get(self, job_id: int) -> JobProgress | None:
        return self._jobs.get(job_id)

    def all(self) -> list[JobProgress]:
        return sorted(self._jobs.values(), key=lambda p: -p.reported_at)

    def work_done_s(self) -> dict[int, float]:
        """Seconds of training each job has done, as it reported (steps x step time): what the Uniform Progress
        escalation weighs for a requeued job (``decide(progress=...)``). An estimate: the steps since its last
        checkpoint are lost in a preemption, and an earlier run's step time may differ."""
        return {p.job_id: p.step * p.step_time_s for p in self._jobs.values()}

    def running(self, running: Mapping[int, Job] | Iterable[int]) -> list[JobProgress]:
        ids = set(running)
        return [p for p in self._jobs.values() if p.job_id in ids]


def finite_or_zero(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else 0.0
