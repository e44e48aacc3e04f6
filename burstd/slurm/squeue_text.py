"""The fast squeue text path: ``squeue -h -a`` with ``SQUEUE_FORMAT2`` -> Jobs (pure parsing, no I/O).

Researchers control names, comments, work dirs and more, and Slurm prints those bytes raw, control
characters and newlines included. So a record boundary must be something no researcher can write: each
snapshot ends its records with ``RS + nonce + newline``, where the nonce is fresh random hex that the adapter
hands squeue in its environment (never on the command line, which every local user can read in /proc). A
job name holding separators stays inside its own record; a record whose field count is off (a field held
the unit separator) or whose job id repeats raises TextParseError and the adapter reads ``squeue --json``
for that snapshot. Nothing is guessed.
"""

from __future__ import annotations

import secrets
from dataclasses import fields as dataclass_fields

from burstd.domain.slurm import Gres, Job
from burstd.slurm.parse import parse_gres, parse_memory_mb, parse_time_limit, split_job_state, str_list

# The fields the text path asks squeue for, in order. Every name exists in squeue -O from 22.05 on.
SQUEUE_TEXT_FIELDS: tuple[str, ...] = (
    "JobID", "ArrayJobID", "ArrayTaskID", "HetJobID", "HetJobOffset", "UserName", "Account", "Partition",
    "QOS", "PriorityLong", "SubmitTime", "EligibleTime", "StartTime", "EndTime", "TimeLimit", "NodeList",
    "NumNodes", "NumCPUs", "MinMemory", "tres-alloc", "tres-per-node", "tres-per-job", "Feature", "State",
    "Reason", "RestartCnt", "Comment", "Name", "Deadline", "ReqNodes", "Reservation",
    "ExcNodes",
)
# A 22.05 squeue has no ExcNodes (the format stops before it), and captures taken by an older burstd
# (``burstctl snapshot --from-files`` replays those) end before Reservation, ReqNodes or Deadline. squeue prints
# every separator, so a live record never has fewer fields.
_OLDER_FIELD_COUNTS = tuple(len(SQUEUE_TEXT_FIELDS) - k for k in (1, 2, 3, 4))
FIELD_SEP = "\x1f"  # ASCII unit separator between fields
RECORD_END = "\x1e"  # ASCII record separator, then the snapshot's nonce, then squeue's newline

# Times past this are Slurm's "never" (e.g. the end of a job with no time limit): None.
_LATEST_TIME = 4_102_444_800  # 2100-01-01


def new_nonce() -> str:
    """64 random bits as hex: no comma (squeue splits -O on commas), unguessable by a job's owner."""
    return secrets.token_hex(8)


def squeue_text_format(nonce: str = "", *, exc_nodes: bool = True) -> str:
    """The ``-O`` / ``SQUEUE_FORMAT2`` value: ``JobID:0<US>,...,Name:0<RS><nonce>`` (``:0`` = never truncate).
    ``exc_nodes=False``: without ExcNodes, for a squeue that lacks it (22.05 prints an empty field instead)."""
    if not nonce.isalnum() and nonce:
        raise ValueError(f"the record nonce must be letters and digits, not {nonce!r}")
    *head, last = SQUEUE_TEXT_FIELDS if exc_nodes else SQUEUE_TEXT_FIELDS[:-1]
    return ",".join([f"{f}:0{FIELD_SEP}" for f in head] + [f"{last}:0{RECORD_END}{nonce}"])


_NULLS = frozenset(("(null)", "N/A"))
_NOT_NUMBERS = frozenset(("N/A", "", "NONE", "Unknown", "UNLIMITED"))
# _job_from_text_values builds Job positionally (measurably faster than keywords); guard the order.
_JOB_ORDER = ("job_id", "name", "user", "account", "partitions", "state", "state_flags", "reason", "qos",
              "priority", "submit_time", "eligible_time", "start_time", "end_time", "time_limit_min", "nodes",
              "node_count", "cpus", "memory_mb", "gres", "features", "restart_count", "comment", "array_job_id",
              "array_task_id", "array_tasks", "het_job_id", "het_job_offset", "hold", "deadline", "required_nodes",
              "excluded_nodes", "reservation")
if tuple(f.name for f in dataclass_fields(Job))[: len(_JOB_ORDER)] != _JOB_ORDER:  # pragma: no cover
    raise ImportError("burstd.domain.slurm.Job fields changed order; update squeue_text._job_from_text_values")
(_I_ID, _I_AJID, _I_ATID, _I_HID, _I_HOFF, _I_USER, _I_ACCT, _I_PART, _I_QOS, _I_PRIO, _I_SUBMIT, _I_ELIG,
 _I_START, _I_END, _I_LIMIT, _I_NODES, _I_NNODES, _I_NCPUS, _I_MINMEM, _I_TRES, _I_TPN, _I_TPJ, _I_FEAT,
 _I_STATE, _I_REASON, _I_RESTART, _I_COMMENT, _I_NAME, _I_DEADLINE, _I_REQNODES,
 _I_RESV, _I_EXCNODES) = range(len(SQUEUE_TEXT_FIELDS))
def _tres_mem_mb(tres: str) -> int | None:
    for item in tres.split(","):
        key, _, val = item.partition("=")
        if key == "mem":
            return parse_memory_mb(val)
    return None


def _tnum(s: str) -> int | None:
    """A text number: digits -> int, Slurm's "no value" words -> None, anything else -> ValueError."""
    if s.isascii() and s.isdigit():
        return int(s)
    if s in _NOT_NUMBERS:
        return None
    raise ValueError(f"not a number: {s!r}")


def _job_id(s: str) -> int:
    """Slurm job ids are 1 .. 2**32-1, printed as ASCII digits; anything else is not squeue's output."""
    n = _tnum(s)
    if n is None or not 0 < n < 2**32:
        raise ValueError(f"not a job id: {s!r}")
    return n


def _ttime(s: str) -> int | None:
    t = _tnum(s)
    return t if t and t < _LATEST_TIME else None


_state_cache: dict[str, tuple[str, tuple[str, ...]]] = {}
_limit_cache: dict[str, int | None] = {}
_gres_cache: dict[str, tuple[Gres, ...]] = {}
_parts_cache: dict[str, tuple[str, ...]] = {}


def _cached(cache: dict, key: str, fn):
    try:
        return cache[key]
    except KeyError:
        if len(cache) > 4096:
            cache.clear()
        value = cache[key] = fn(key)
        return value


def _job_from_text_values(v: list[str]) -> Job:
    state, flags = _cached(_state_cache, v[_I_STATE], split_job_state)
    reason = v[_I_REASON] or "None"
    priority = _tnum(v[_I_PRIO]) or 0
    cpus = _tnum(v[_I_NCPUS]) or 1
    node_count = _tnum(v[_I_NNODES]) or 1
    task = v[_I_ATID]
    if task.isascii() and task.isdigit():
        array_task_id, array_tasks = int(task), ""
    else:
        array_task_id, array_tasks = None, ("" if task in _NOT_NUMBERS else task)
    array_job_id = _job_id(v[_I_AJID]) if (array_tasks or array_task_id is not None) else None
    het_job_id = _tnum(v[_I_HID]) or None
    mem = None
    minmem = v[_I_MINMEM]
    if minmem != "0" and parse_memory_mb(minmem) is not None:  # "0" = nothing asked; tres holds the job total
        total = _tres_mem_mb(v[_I_TRES])
        mem = total // node_count if total else parse_memory_mb(minmem)
    tpn, tpj = v[_I_TPN], v[_I_TPJ]
    gres = _cached(_gres_cache, tpn, parse_gres) if tpn not in _NULLS else ()
    if not gres and tpj not in _NULLS:
        gres = _cached(_gres_cache, tpj, parse_gres)
    account, qos, comment, feature, nodes = v[_I_ACCT], v[_I_QOS], v[_I_COMMENT], v[_I_FEAT], v[_I_NODES]
    return Job(
        _job_id(v[_I_ID]),  # job_id
        v[_I_NAME],  # name
        v[_I_USER],  # user
        "" if account in _NULLS else account,
        _cached(_parts_cache, v[_I_PART], str_list),
        state,
        flags,
        reason,
        "" if qos in _NULLS else qos,
        priority,
        _ttime(v[_I_SUBMIT]),
        _ttime(v[_I_ELIG]),
        _ttime(v[_I_START]),
        _ttime(v[_I_END]),
        _cached(_limit_cache, v[_I_LIMIT], parse_time_limit),
        "" if nodes in _NULLS else nodes,
        node_count,
        cpus,
        mem,
        gres,
        "" if feature in _NULLS else feature,
        _tnum(v[_I_RESTART]) or 0,
        "" if comment in _NULLS else comment,
        array_job_id,
        array_task_id,
        array_tasks,
        het_job_id,
        (_tnum(v[_I_HOFF]) if het_job_id is not None else None),
        reason in ("JobHeldUser", "JobHeldAdmin") and priority == 0,
        _ttime(v[_I_DEADLINE]) if len(v) > _I_DEADLINE else None,  # deadline ("N/A": none declared)
        _later_text(v, _I_REQNODES),
        _later_text(v, _I_EXCNODES),
        _later_text(v, _I_RESV),
    )


def _later_text(v: list[str], i: int) -> str:
    """A text field that joined the format later: "" where the record ends before it, or Slurm says none (22.05
    prints "(null)")."""
    return "" if len(v) <= i or v[i] in _NULLS else v[i]


class TextParseError(ValueError):
    """A squeue text record that does not split cleanly (a field held a separator): use JSON instead."""


#: ``squeue -o`` for a release whose ``-O`` has no ExcNodes: each pending job's id and ``sbatch -x`` list
EXCLUSIONS_FORMAT = "%A|%x"


def exclusions_from_text(output: str) -> dict[int, str]:
    """``squeue -h -t PENDING -o %A|%x`` -> {job id: its excluded hostlist}, jobs that exclude none left out.
    Slurm checked the names when the job was submitted; a line that is not "digits|list" is not squeue's."""
    out: dict[int, str] = {}
    for line in output.splitlines():
        if not line:
            continue
        job, sep, excluded = line.partition("|")
        if not sep:
            raise TextParseError(f"squeue exclusions line without a separator: {line[:80]!r}")
        if excluded and excluded not in _NULLS:
            try:
                out[_job_id(job)] = excluded
            except ValueError as exc:
                raise TextParseError(f"squeue exclusions line: {exc}") from None
    return out


def jobs_from_squeue_text(output: str, cache: dict[str, Job] | None = None, *, nonce: str = "") -> list[Job]:
    """Parse the output of ``squeue -h -a`` with ``SQUEUE_FORMAT2=squeue_text_format(nonce)``, SLURM_TIME_FORMAT=%s.

    Free text (names, comments, accounts) may hold anything, newlines and separators included: records end
    with ``RS + nonce + newline`` and fields are split on ``US``. A record whose field count or numbers do
    not add up, or a job id seen twice, raises TextParseError so the caller can fall back to the JSON path.

    ``cache`` maps a record's exact text to the Job parsed from it last time (Jobs are immutable). Pass
    the same dict every cycle: records that did not change are not parsed again, and the dict is
    rebuilt to hold only this output's records, so it never outgrows the queue.
    """
    if not output:
        if cache is not None:
            cache.clear()
        return []
    terminator = RECORD_END + nonce + "\n"
    if not output.endswith(terminator):
        raise TextParseError("squeue output does not end with a record terminator")
    previous = cache if cache is not None else {}
    records = output[: -len(terminator)].split(terminator)
    get = previous.get
    jobs: list[Job | None] = [get(rec) for rec in records]
    n = len(SQUEUE_TEXT_FIELDS)
    misses = 0
    for i, job in enumerate(jobs):
        if job is not None:
            continue
        misses += 1
        rec = records[i]
        values = rec.split(FIELD_SEP)
        if len(values) != n and len(values) not in _OLDER_FIELD_COUNTS:
            raise TextParseError(f"squeue record with {len(values)} fields, expected {n}: {rec[:80]!r}")
        try:
            jobs[i] = _job_from_text_values(values)
        except (ValueError, KeyError, IndexError) as exc:
            raise TextParseError(f"squeue record does not parse ({exc}): {rec[:80]!r}") from None
    parsed = [j for j in jobs if j is not None]  # every record parsed (or raised) above
    if len({j.job_id for j in parsed}) != len(parsed):
        raise TextParseError("squeue printed one job id twice")
    if cache is not None and (misses or len(cache) != len(records)):
        cache.clear()
        cache.update(zip(records, parsed))
    return parsed
