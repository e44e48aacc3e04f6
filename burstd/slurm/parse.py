"""Normalise what any Slurm version says (22.05 .. 26.05; CLI JSON, slurmrestd JSON, text) into domain types.

Pure functions: bytes/dicts/strings in, ``burstd.domain.slurm`` objects out. No subprocess, no HTTP.

Version differences handled here (see tests/data/slurm-fixtures/README.md):

* numbers: 22.05 plain ints (``null`` for NO_VAL/INFINITE) vs ``{"set","infinite","number"}`` objects;
* job_state: 22.05 one string (which may be a flag such as ``CONFIGURING``) vs a list, base state first;
* node state: 22.05 ``"idle"`` + ``state_flags`` vs one upper-case list;
* features: comma strings (22.05) vs lists; ``gres:gpu:1`` (22.05) vs ``gres/gpu:1``;
* sinfo: per-node records (22.05) vs grouped partition x state records (23.02+);
* partitions: flat (v0.0.38 REST), nested (v0.0.40+), or ``scontrol show partitions -o`` text.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from burstd.domain.slurm import Gres, Job, Node, Partition, Snapshot
from burstd.slurm.base import SlurmError
from burstd.domain.hostlist import HostlistError, expand

# 32-bit NO_VAL / INFINITE and friends, which 22.05 sometimes prints as plain numbers.
_SENTINELS = {0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFF, 0xFFFE, -1}

# Job "states" older Slurm prints instead of the base state when a flag is set (job_state_string()).
_JOB_FLAG_TO_BASE = {
    "CONFIGURING": "RUNNING",
    "POWER_UP_NODE": "RUNNING",
    "RESIZING": "RUNNING",
    "SIGNALING": "RUNNING",
    "STOPPED": "RUNNING",
    "UPDATE_DB": "RUNNING",
    "COMPLETING": "COMPLETING",
    "STAGE_OUT": "COMPLETING",
    "REQUEUED": "PENDING",
    "REQUEUE_FED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "SPECIAL_EXIT": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "REVOKED": "REVOKED",
}

_JOB_BASE_SHORT = {
    "PD": "PENDING", "R": "RUNNING", "CF": "CONFIGURING", "CG": "COMPLETING", "CD": "COMPLETED",
    "F": "FAILED", "TO": "TIMEOUT", "CA": "CANCELLED", "S": "SUSPENDED", "PR": "PREEMPTED",
    "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "BF": "BOOT_FAIL", "DL": "DEADLINE",
}


# --------------------------------------------------------------------------- scalars
def num(value: Any, *, zero_is_none: bool = False) -> int | None:
    """An int from any Slurm number form; ``None`` for unset, infinite, NO_VAL or null."""
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value or value in ("N/A", "(null)", "UNLIMITED", "INFINITE", "NONE"):
            return None
        try:
            value = float(value)
        except ValueError:
            return None
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):  # NaN, infinity ("1e400" reads as inf): no number
        return None
    if n in _SENTINELS:
        return None
    if zero_is_none and n == 0:
        return None
    return n


# Times past this are Slurm's "never" (e.g. the end of a job with no time limit): None.
_LATEST_TIME = 4_102_444_800  # 2100-01-01


def time_or_none(value: Any) -> int | None:
    t = num(value, zero_is_none=True)
    return t if t is not None and 0 < t < _LATEST_TIME else None


def user_name(name: Any, uid: Any) -> str:
    """v0.0.36 job records carry only user_id: look the name up locally, else keep the number."""
    if name:
        return str(name)
    n = num(uid)
    if n is None:
        return ""
    try:
        import pwd

        return pwd.getpwuid(n).pw_name
    except (KeyError, OverflowError):
        return str(n)


def is_infinite(value: Any) -> bool:
    if isinstance(value, Mapping):
        return bool(value.get("infinite"))
    return value is None or value in (0xFFFFFFFF, -1, "UNLIMITED", "INFINITE")


def text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def str_list(value: Any) -> tuple[str, ...]:
    """Features/partitions: a list (new) or a comma string (22.05)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(s for s in (p.strip() for p in value.split(",")) if s and s != "(null)")
    return tuple(str(v) for v in value if str(v))


def parse_gres(spec: Any) -> tuple[Gres, ...]:
    """``gres/gpu:a100:1``, ``gres:gpu:1``, ``gpu:a100:2(S:0-1)``, ``gpu`` -> Gres tuples (``N/A`` -> ()).
    A count too long to be a number (thousands of digits) raises ValueError."""
    out: list[Gres] = []
    for item in str_list(spec):
        item = re.sub(r"\(.*?\)", "", item).strip()
        if not item or item in ("N/A", "(null)"):
            continue
        for prefix in ("gres/", "gres:"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        parts = item.split(":")
        count = 1
        if len(parts) > 1 and re.fullmatch(r"\d+[KMGTP]?", parts[-1]):
            raw = parts.pop()
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
            count = int(raw[:-1]) * mult[raw[-1]] if raw[-1] in mult else int(raw)
        name = parts[0]
        gtype = ":".join(parts[1:]) or None
        out.append(Gres(name=name, type=gtype, count=count))
    return tuple(out)


def parse_time_limit(value: str) -> int | None:
    """Slurm's text time limit (``30:00``, ``2:00:00``, ``1-00:00:00``, ``UNLIMITED``) -> minutes; anything
    else raises ValueError."""
    value = value.strip()
    if value in ("", "UNLIMITED", "INFINITE", "N/A", "NOT_SET"):
        return None
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
    parts = [int(p) for p in value.split(":")]
    if len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, m, s = (0, *parts) if days == 0 else (*parts, 0)
    else:
        h, m, s = (0, parts[0], 0) if days == 0 else (parts[0], 0, 0)
    return days * 1440 + h * 60 + m + (1 if s else 0)


def parse_memory_mb(value: str) -> int | None:
    """``300M``, ``2G``, ``500`` (MiB) -> MiB; ``0``/``N/A`` -> None."""
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", value)
    if not m:
        return None
    n, unit = float(m.group(1)), m.group(2) or "M"
    mb = n * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}[unit]
    try:
        return int(mb) or None
    except OverflowError:  # hundreds of digits read as infinity: no size anyone can have
        return None


def split_job_state(state: Any) -> tuple[str, tuple[str, ...]]:
    if isinstance(state, (list, tuple)):
        names = [str(s).upper() for s in state if s]
        if not names:
            return "UNKNOWN", ()
        return names[0], tuple(names[1:])
    name = str(state or "UNKNOWN").upper()
    name = _JOB_BASE_SHORT.get(name, name)
    if name in _JOB_FLAG_TO_BASE and name not in ("COMPLETING", "REVOKED"):
        return _JOB_FLAG_TO_BASE[name], (name,)
    if name == "COMPLETING":
        return "COMPLETING", ("COMPLETING",)
    return name, ()


def split_node_state(state: Any, flags: Any = None) -> tuple[str, tuple[str, ...]]:
    """22.05: ``"idle"`` + ``state_flags``; 23.02+: ``["IDLE","CLOUD",...]``; text: ``IDLE+CLOUD+POWERED_DOWN``."""
    if isinstance(state, str):
        parts = [p for p in state.upper().split("+") if p]
        base = parts[0] if parts else "UNKNOWN"
        extra = list(parts[1:]) + [str(f).upper() for f in (flags or [])]
    else:
        parts = [str(s).upper() for s in (state or [])]
        base = parts[0] if parts else "UNKNOWN"
        extra = parts[1:] + [str(f).upper() for f in (flags or [])]
    seen: dict[str, None] = {}
    for f in extra:
        seen.setdefault(f, None)
    return base, tuple(seen)


# --------------------------------------------------------------------------- jobs
def _memory_per_node(rec: Mapping[str, Any], cpus: int, node_count: int) -> int | None:
    per_node = num(rec.get("memory_per_node"), zero_is_none=True)
    if per_node is not None:
        return per_node
    per_cpu = num(rec.get("memory_per_cpu"), zero_is_none=True)
    if per_cpu is not None:
        return per_cpu * max(1, cpus // max(1, node_count))
    return None


def _hold(rec: Mapping[str, Any], reason: str, priority: int) -> bool:
    if isinstance(rec.get("hold"), bool):
        return rec["hold"]
    return reason in ("JobHeldUser", "JobHeldAdmin") and priority == 0


def job_from_json(rec: Mapping[str, Any]) -> Job:
    """One job record from squeue/scontrol --json or slurmrestd /jobs (any data-parser version)."""
    try:
        job_id = int(rec["job_id"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise SlurmError(f"job record without a usable job_id: {exc}") from None
    state, flags = split_job_state(rec.get("job_state"))
    reason = text(rec.get("state_reason")) or "None"
    priority = num(rec.get("priority")) or 0
    cpus = num(rec.get("cpus")) or 1
    node_count = num(rec.get("node_count")) or 1
    array_job_id = num(rec.get("array_job_id"), zero_is_none=True)
    array_tasks = text(rec.get("array_task_string"))
    array_task_id = num(rec.get("array_task_id"))
    if array_tasks:
        array_task_id = None
    het_job_id = num(rec.get("het_job_id"), zero_is_none=True)
    gres = parse_gres(rec.get("tres_per_node")) or parse_gres(rec.get("tres_per_job"))
    return Job(
        job_id=job_id,
        name=text(rec.get("name")),
        user=user_name(rec.get("user_name"), rec.get("user_id")),
        account=text(rec.get("account")),
        partitions=str_list(rec.get("partition")),
        state=state,
        state_flags=flags,
        reason=reason,
        qos=text(rec.get("qos")),
        priority=priority,
        submit_time=time_or_none(rec.get("submit_time")),
        eligible_time=time_or_none(rec.get("eligible_time")),
        start_time=time_or_none(rec.get("start_time")),
        end_time=time_or_none(rec.get("end_time")),
        time_limit_min=num(rec.get("time_limit"), zero_is_none=False),
        nodes=text(rec.get("nodes")),
        node_count=node_count,
        cpus=cpus,
        memory_mb=_memory_per_node(rec, cpus, node_count),
        gres=gres,
        features=text(rec.get("features")),
        restart_count=num(rec.get("restart_cnt")) or 0,
        comment=text(rec.get("comment")),
        array_job_id=array_job_id if (array_tasks or array_task_id is not None) else None,
        array_task_id=array_task_id,
        array_tasks=array_tasks,
        het_job_id=het_job_id,
        het_job_offset=num(rec.get("het_job_offset")) if het_job_id is not None else None,
        hold=_hold(rec, reason, priority),
        deadline=time_or_none(rec.get("deadline")),  # 0 (22.05) or number 0 (later): none declared
        required_nodes=text(rec.get("required_nodes")),
        excluded_nodes=text(rec.get("excluded_nodes")),
        reservation=text(rec.get("resv_name")),
    )


# --------------------------------------------------------------------------- nodes
def node_from_json(rec: Mapping[str, Any]) -> Node:
    """One node record from 22.05 sinfo --json, scontrol show nodes --json, or slurmrestd /nodes."""
    state, flags = split_node_state(rec.get("state"), rec.get("state_flags"))
    return Node(
        name=text(rec.get("name")),
        state=state,
        flags=flags,
        partitions=str_list(rec.get("partitions")),
        features=str_list(rec.get("active_features") or rec.get("features")),
        gres=parse_gres(rec.get("gres")),
        address=text(rec.get("address")),
        hostname=text(rec.get("hostname")),
        cpus=num(rec.get("cpus")) or 0,
        memory_mb=num(rec.get("real_memory")) or 0,
        reason=text(rec.get("reason")),
        boot_time=time_or_none(rec.get("boot_time")),
        instance_id=text(rec.get("instance_id")),
    )


def nodes_from_sinfo_groups(groups: Iterable[Mapping[str, Any]]) -> list[Node]:
    """23.02+ ``sinfo --json``: one record per partition x state group; merge into one Node per name."""
    by_name: dict[str, Node] = {}
    for g in groups:
        names = (g.get("nodes") or {}).get("nodes") or []
        if isinstance(names, str):
            names = expand(names)
        if not all(isinstance(n, str) and n for n in names):
            raise TypeError(f"sinfo node names must be strings, not {names!r:.80}")
        state, flags = split_node_state((g.get("node") or {}).get("state"))
        part = text((g.get("partition") or {}).get("name"))
        feats = (g.get("features") or {}).get("active") or (g.get("features") or {}).get("total")
        reason = g.get("reason") or {}
        for name in names:
            old = by_name.get(name)
            parts = (old.partitions if old else ()) + ((part,) if part and (not old or part not in old.partitions) else ())
            by_name[name] = Node(
                name=name,
                state=state,
                flags=flags,
                partitions=parts,
                features=str_list(feats),
                gres=parse_gres((g.get("gres") or {}).get("total")),
                address="",
                hostname="",
                cpus=num((g.get("cpus") or {}).get("maximum")) or 0,
                memory_mb=num((g.get("memory") or {}).get("maximum")) or 0,
                reason=text(reason.get("description") if isinstance(reason, Mapping) else reason),
            )
    return list(by_name.values())


# --------------------------------------------------------------------------- partitions
def partition_from_json(rec: Mapping[str, Any]) -> Partition:
    name = text(rec.get("name"))
    nodes = rec.get("nodes")
    if isinstance(nodes, Mapping):  # v0.0.40+
        state = text(((rec.get("partition") or {}).get("state") or ["UP"])[0])
        max_time = (rec.get("maximums") or {}).get("time")
        flags = [str(f).upper() for f in rec.get("flags") or []]
        return Partition(
            name=name,
            nodes=text(nodes.get("configured")),
            state=state.upper(),
            max_time_min=num(max_time),
            default="DEFAULT" in flags,
            total_cpus=num((rec.get("cpus") or {}).get("total")) or 0,
            total_nodes=num(nodes.get("total")) or 0,
        )
    # v0.0.36..38 (22.05 REST): flat
    flags = [str(f).upper() for f in rec.get("flags") or []]
    max_time = rec.get("max_time_limit", rec.get("max_time"))
    return Partition(
        name=name,
        nodes=text(nodes),
        state=text(rec.get("state") or "UP").upper(),
        max_time_min=num(max_time),
        default="DEFAULT" in flags,
        total_cpus=num(rec.get("total_cpus")) or 0,
        total_nodes=num(rec.get("total_nodes")) or 0,
    )


def parse_kv_line(line: str) -> dict[str, str]:
    """``scontrol show ... -o`` one-liner -> {key: value}. Values never contain spaces for partitions."""
    out: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def partitions_from_scontrol_text(output: str) -> list[Partition]:
    parts: list[Partition] = []
    for n, line in enumerate(output.splitlines(), 1):
        kv = parse_kv_line(line)
        if "PartitionName" not in kv:
            continue
        nodes = kv.get("Nodes", "")
        try:
            max_time = parse_time_limit(kv.get("MaxTime", "UNLIMITED"))
        except ValueError:
            raise SlurmError(f"scontrol show partitions line {n}: MaxTime={kv['MaxTime'][:40]!r} is not a time") from None
        parts.append(
            Partition(
                name=kv["PartitionName"],
                nodes="" if nodes == "(null)" else nodes,
                state=kv.get("State", "UP").upper(),
                max_time_min=max_time,
                default=kv.get("Default", "NO").upper() == "YES",
                total_cpus=num(kv.get("TotalCPUs")) or 0,
                total_nodes=num(kv.get("TotalNodes")) or 0,
            )
        )
    return parts


def partitions_from_nodes(nodes: Iterable[Node]) -> list[Partition]:
    """When no partition listing is at hand: names, members and sizes from the nodes themselves."""
    members: dict[str, list[Node]] = {}
    for n in nodes:
        for p in n.partitions:
            members.setdefault(p, []).append(n)
    from burstd.domain.hostlist import compress

    return [
        Partition(name=p, nodes=compress(n.name for n in ns), total_nodes=len(ns), total_cpus=sum(n.cpus for n in ns))
        for p, ns in members.items()
    ]


# --------------------------------------------------------------------------- documents
def slurm_version(doc: Mapping[str, Any]) -> str:
    meta = doc.get("meta") or {}
    sl = meta.get("slurm") or meta.get("Slurm") or {}
    if sl.get("release"):
        return str(sl["release"])
    v = sl.get("version") or {}
    if v:
        return ".".join(str(v.get(k, "")) for k in ("major", "minor", "micro"))
    return ""


def data_parser(doc: Mapping[str, Any]) -> str:
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    return text(plugin.get("data_parser") or plugin.get("type"))


def decode_output(raw: bytes) -> str:
    """What a Slurm command or slurmrestd printed, as text. Slurm passes a job's name, comment or account through
    byte for byte, so a user can put invalid UTF-8 in any of them: each bad byte becomes U+FFFD rather than
    making the whole listing undecodable. (Not surrogate escapes: those cannot be encoded again, and the text
    goes on to the database, the API's JSON and the terminal.)"""
    return raw.decode("utf-8", errors="replace")


def load_json(raw: bytes | str, what: str, empty_ok: frozenset[int] = frozenset()) -> dict[str, Any]:
    """A Slurm JSON document; its ``errors`` raise SlurmError, except those whose ``error_number`` is in
    ``empty_ok`` (codes that only say the answer is empty)."""
    try:
        doc = json.loads(decode_output(raw) if isinstance(raw, bytes) else raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SlurmError(f"{what}: not JSON ({exc})") from None
    except RecursionError:
        raise SlurmError(f"{what}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise SlurmError(f"{what}: expected a JSON object")
    errors = [e for e in doc.get("errors") or []
              if e and not (isinstance(e, dict) and e.get("error_number") in empty_ok)]
    if errors:
        raise SlurmError(f"{what}: Slurm reported errors: {errors}")
    return doc


# What a document of the wrong shape raises inside the readers below (a list where a record belongs, a
# number of thousands of digits...): each reader turns it into SlurmError, the backends' one error.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, OverflowError, HostlistError)
_T = TypeVar("_T")


def _reads(what: str) -> Callable[[Callable[[Mapping[str, Any]], _T]], Callable[[Mapping[str, Any]], _T]]:
    def wrap(fn: Callable[[Mapping[str, Any]], _T]) -> Callable[[Mapping[str, Any]], _T]:
        @functools.wraps(fn)
        def reader(doc: Mapping[str, Any]) -> _T:
            try:
                return fn(doc)
            except _MALFORMED as exc:
                raise SlurmError(f"malformed Slurm {what} ({type(exc).__name__}: {str(exc)[:200]})") from None
        return reader
    return wrap


def is_job_state_listing(doc: Mapping[str, Any]) -> bool:
    """slurmrestd ``/jobs/state`` (v0.0.42+): only ``{"job_id": "19+0", "state": [...]}`` per job."""
    recs = doc.get("jobs") or []
    return bool(recs) and all("job_state" not in r and "state" in r for r in recs)


@_reads("job state listing")
def job_states_from_doc(doc: Mapping[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``/jobs/state`` -> {"19+0": ("PENDING", ()), ...}; ids stay strings (het/array forms)."""
    return {text(r.get("job_id")): split_job_state(r.get("state")) for r in doc.get("jobs") or []}


@_reads("job listing")
def jobs_from_doc(doc: Mapping[str, Any]) -> list[Job]:
    if is_job_state_listing(doc):
        return []  # a state listing carries no job details; see job_states_from_doc
    return [job_from_json(r) for r in doc.get("jobs") or []]


@_reads("node listing")
def nodes_from_doc(doc: Mapping[str, Any]) -> list[Node]:
    if "sinfo" in doc:
        return nodes_from_sinfo_groups(doc["sinfo"] or [])
    # slurmrestd /resources/{id} also has "nodes", but as allocation records keyed "node": not node records
    return [node_from_json(r) for r in doc.get("nodes") or [] if isinstance(r, Mapping) and r.get("name")]


@_reads("partition listing")
def partitions_from_doc(doc: Mapping[str, Any]) -> list[Partition]:
    if "partitions" in doc:
        return [partition_from_json(r) for r in doc["partitions"] or []]
    if "sinfo" in doc:
        seen: dict[str, Partition] = {}
        for g in doc["sinfo"] or []:
            p = g.get("partition")
            if p and p.get("name") and p["name"] not in seen:
                seen[p["name"]] = partition_from_json(p)
        return list(seen.values())
    return []


def snapshot_from_docs(
    docs: Iterable[tuple[str, Mapping[str, Any]]], *, taken_at: float, source: str, active_only: bool = True
) -> Snapshot:
    """Merge any mix of saved squeue/sinfo/scontrol/slurmrestd documents into one Snapshot.

    Jobs come from every document with ``jobs`` (de-duplicated by id, last one wins); nodes from per-node
    documents if there are any, else from grouped sinfo; partitions from partition listings, else sinfo's
    embedded partitions, else derived from the nodes.
    """
    jobs: dict[int, Job] = {}
    node_recs: dict[str, Node] = {}
    group_nodes: dict[str, Node] = {}
    parts: dict[str, Partition] = {}
    version = ""
    for what, doc in docs:
        try:
            version = version or slurm_version(doc)
            for j in jobs_from_doc(doc):
                jobs[j.job_id] = j
            target = group_nodes if "sinfo" in doc else node_recs
            for n in nodes_from_doc(doc):
                target[n.name] = n
            for p in partitions_from_doc(doc):
                if "partitions" in doc or p.name not in parts:
                    parts[p.name] = p
        except (SlurmError, *_MALFORMED) as exc:
            raise SlurmError(f"{what}: cannot read Slurm data: {exc}") from None
    nodes = {**group_nodes, **node_recs}
    # grouped sinfo has no addresses; a per-node record (if any) wins, keep sinfo's partitions otherwise
    if not parts and nodes:
        parts = {p.name: p for p in partitions_from_nodes(nodes.values())}
    job_list = sorted(jobs.values(), key=lambda j: j.job_id)
    if active_only:
        job_list = [j for j in job_list if j.is_active]
    return Snapshot(
        taken_at=taken_at,
        jobs=tuple(job_list),
        nodes=tuple(sorted(nodes.values(), key=lambda n: n.name)),
        partitions=tuple(parts.values()),
        slurm_version=version,
        source=source,
    )


def snapshot_as_dict(snap: Snapshot) -> dict[str, Any]:
    """A Snapshot as plain JSON-able data (what ``burstctl snapshot --json`` prints)."""
    from dataclasses import asdict

    return {
        "taken_at": snap.taken_at,
        "slurm_version": snap.slurm_version,
        "source": snap.source,
        "jobs": [asdict(j) for j in snap.jobs],
        "nodes": [asdict(n) for n in snap.nodes],
        "partitions": [asdict(p) for p in snap.partitions],
    }
