"""What ``sacct`` prints about allocations, read so that no field of a job can forge, hide or move another job
(``burstctl spend --reconcile``). Pure: text or documents in, :class:`SacctJob` rows out.

A user writes some of what slurmdbd records (the account string, where associations are not enforced; the
job name), and ``sacct -P`` prints it raw: a newline or a ``|`` in it used to split one record into several,
inventing a job on a cloud node, hiding a real one, or moving it to another node and account. So:

* ``sacct --json`` (every release burstd supports: 22.05 through its openapi/dbv0.0.38 plugin, 23.02+ through
  data_parser) is read first: JSON strings cannot leak into another record;
* where that fails (a Slurm built without the JSON plugins), ``-P`` with a fresh random field delimiter per
  call, which no stored text can hold, and each record rebuilt from the delimiters rather than from newlines;
* every row is checked strictly either way (a numeric job id, a node list in hostlist grammar, a state word,
  times): a row that does not read raises :class:`SlurmError` naming it. Nothing is skipped: a skipped row
  would be a hidden job.

Requeued jobs: ``--duplicates`` lists every run of a job, one row each (the same job id); the caller joins them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

from burstd.domain.sacct import SacctJob
from burstd.slurm.base import HOSTLIST_RE, SlurmError
from burstd.domain.hostlist import HostlistError, expand
from burstd.slurm.parse import num, time_or_none

# JobIDRaw: a job's own id (an array task's is not "7_0" but its own number, the id burstd charges)
TEXT_FIELDS = ("JobIDRaw", "Account", "User", "NodeList", "State", "Start", "End")
MAX_JOB_ID = 2**32 - 1
_NO_NODES = ("", "None assigned", "(null)")
_STATE_RE = re.compile(r"^([A-Z][A-Z_]{0,30})(?: by \d{1,10})?\+?$")  # "CANCELLED by 1000", "COMPLETED"
_NO_TIME = ("", "Unknown", "None", "0")


def new_delimiter() -> str:
    """A field delimiter for one ``sacct -P`` call: random, so that no text stored before the call holds it."""
    return f"|{secrets.token_hex(8)}|"


def _row(what: str, job_id: Any, account: Any, user: Any, nodelist: Any, state: Any, start: float | None,
         end: float | None, array: tuple[int, int] | None = None) -> SacctJob:
    """One checked row; ``what`` names it in errors (free text shown escaped, never raw)."""
    if isinstance(job_id, str):
        job_id = int(job_id) if job_id.isascii() and job_id.isdigit() and len(job_id) <= 10 else None
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= MAX_JOB_ID:
        raise SlurmError(f"{what}: job id {job_id!r} is not a Slurm job id")
    for name, value in (("account", account), ("user", user)):
        if not isinstance(value, str):
            raise SlurmError(f"{what} (job {job_id}): {name} {value!r} is not text")
    if not isinstance(nodelist, str):
        raise SlurmError(f"{what} (job {job_id}): node list {nodelist!r} is not text")
    hosts: tuple[str, ...] = ()
    if nodelist not in _NO_NODES:
        if not HOSTLIST_RE.fullmatch(nodelist):
            raise SlurmError(f"{what} (job {job_id}): node list {nodelist!r} is not a Slurm hostlist")
        try:
            hosts = tuple(expand(nodelist))
        except HostlistError as exc:
            raise SlurmError(f"{what} (job {job_id}): node list {nodelist!r} burstd cannot read: {exc}") from None
    m = _STATE_RE.fullmatch(state) if isinstance(state, str) else None
    if m is None:
        raise SlurmError(f"{what} (job {job_id}): state {state!r} is not a Slurm job state")
    task = array if array and all(0 <= n <= MAX_JOB_ID for n in array) else (None, None)
    return SacctJob(job_id=job_id, account=account, user=user, nodes=hosts, state=m.group(1), start=start, end=end,
                    array_job_id=task[0], array_task_id=task[1])


# --------------------------------------------------------------------------- --json
def _json_time(value: Any) -> float | None:
    t = time_or_none(value)  # 22.05 plain ints (0: not yet), 23.02+ plain or {"set","number"}
    return float(t) if t is not None else None


def _json_array(array: Any) -> tuple[int, int] | None:
    """(array job id, task id) of an array task; None for a job that is not one (22.05: ``job_id`` 0 and
    ``task_id`` null; 23.02+: ``task_id`` a {set, number} object)."""
    if not isinstance(array, Mapping):
        return None
    job, task = num(array.get("job_id"), zero_is_none=True), num(array.get("task_id"))
    return None if job is None or task is None else (job, task)


#: The flags that name a run's state in sacct's text, in the order Slurm's job_state_string() tests them; 23.02+'s
#: JSON lists the base state first and these flags after it (a requeued run: ["PENDING", "REQUEUED"]).
_STATE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")


def _json_state(state: Any) -> Any:
    current = state.get("current") if isinstance(state, Mapping) else state  # 22.05 a string, 23.02+ a list
    if isinstance(current, list):
        if not current or not all(isinstance(w, str) for w in current):
            return None
        return next((flag for flag in _STATE_FLAGS if flag in current[1:]), current[0])
    return current


#: slurmdbd's "Nothing found" (ESLURM_REST_EMPTY_RESULT): no job matched, which is an empty answer, not an error
#: (a job slurmdbd has not recorded yet, or a quiet period). Seen on the 22.05 bed.
NOTHING_FOUND = frozenset({9003})

def jobs_from_json(doc: Mapping[str, Any], what: str = "sacct --json") -> list[SacctJob]:
    """``sacct --json`` (22.05's dbv0.0.38 and 23.02+'s data_parser shapes): one row per recorded run."""
    records = doc.get("jobs")
    if records is None and any(isinstance(e, Mapping) and e.get("error_number") in NOTHING_FOUND
                               for e in doc.get("errors") or []):
        return []
    if not isinstance(records, list):
        raise SlurmError(f"{what}: no list of jobs")
    rows = []
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise SlurmError(f"{what}: record {i} is not an object")
        times = rec.get("time")
        times = times if isinstance(times, Mapping) else {}
        rows.append(_row(f"{what} record {i}", rec.get("job_id"), rec.get("account") or "", rec.get("user") or "",
                         rec.get("nodes") or "", _json_state(rec.get("state")), _json_time(times.get("start")),
                         _json_time(times.get("end")), _json_array(rec.get("array"))))
    return rows


# --------------------------------------------------------------------------- -P --delimiter
def _text_time(value: str, what: str) -> float | None:
    if value in _NO_TIME:
        return None
    if value.isascii() and value.isdigit() and len(value) <= 12:  # SLURM_TIME_FORMAT=%s
        return float(value)
    raise SlurmError(f"{what}: time {value!r} is not Unix seconds")


def jobs_from_text(out: str, delimiter: str) -> list[SacctJob]:
    """``sacct -n -P --delimiter=D --format=<TEXT_FIELDS>``: records rebuilt from the delimiters.

    Only the first and the last field (the job id and the end time, both Slurm's own) meet the newline between
    two records, so a newline inside any other field stays inside it; a record with the wrong number of
    fields cannot happen unless the output is cut short, and raises."""
    if not delimiter or "\n" in delimiter:
        raise ValueError("the sacct delimiter must be non-empty and on one line")
    if not out.strip():
        return []
    pieces = out.split(delimiter)
    per = len(TEXT_FIELDS) - 1
    if (len(pieces) - 1) % per:
        raise SlurmError(f"sacct printed {len(pieces) - 1} delimiters: not {per} a record (output cut short?)")
    rows: list[SacctJob] = []
    count, first = (len(pieces) - 1) // per, pieces[0]
    for k in range(count):
        fields = [first, *pieces[k * per + 1 : (k + 1) * per + 1]]
        boundary = fields[-1]
        fields[-1], _, first = boundary.partition("\n")  # the end time, then the next record's job id
        what = f"sacct record {k + 1}"
        if k + 1 < count and ("\n" in first or not first):
            raise SlurmError(f"{what}: {boundary!r} is not an end time and a job id")
        jid, account, user, nodelist, state, start, end = fields
        rows.append(_row(what, jid, account, user, nodelist, state, _text_time(start, what), _text_time(end, what)))
    if first.strip():
        raise SlurmError(f"sacct printed text after its last record: {first[:80]!r}")
    return rows
