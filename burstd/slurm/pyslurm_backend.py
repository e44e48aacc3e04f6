"""The ``pyslurm`` backend: libslurm through pyslurm's object API (``Jobs.load()``, ``Nodes.load()``, ...).

pyslurm is built against one exact Slurm release, and PyPI only has pyslurm 25.11 (Slurm 25.11). So this
backend is only picked when ``import pyslurm`` works and its version matches the site's Slurm; everywhere
else use ``cli`` or ``rest``. burstd's tests exercise it against *recorded object shapes*: fakes with the
attribute names and value conventions of pyslurm 25.11's ``Job``/``Node``/``Partition`` (built from the
fixture JSON), not against a live libslurm. The attribute names used here are pyslurm 25.11's:

* Job: ``id name user_name account partition qos priority state state_reason submit_time eligible_time
  start_time end_time time_limit allocated_nodes num_nodes cpus memory_per_cpu memory_per_node
  gres_per_node constraints requeue_count comment array_id array_task_id array_tasks_waiting
  array_tasks_parallel heterogeneous_id heterogeneous_offset``
* Node: ``name state (e.g. "IDLE+CLOUD+POWERED_DOWN") partitions active_features configured_gres address
  hostname total_cpus real_memory_raw reason boot_time_raw``
* Partition: ``name nodes state max_time_limit is_default total_cpus total_nodes``
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from burstd.config import SlurmConfig
from burstd.domain.slurm import Gres, Job, Node, Partition, Snapshot
from burstd.slurm import parse
from burstd.slurm.accounting import NoSlurmdbd
from burstd.slurm.health import NoHealthProbe
from burstd.slurm.base import (PartitionEdits, PARTITION_RE, REQUEUE_START_GAP_S, SlurmError, check_name,
                               check_reason)
from burstd.slurm.cli import ADDRESS_RE, HeadScontrol, _hostlist, _job_id, _signal


def import_pyslurm() -> ModuleType:
    try:
        import pyslurm
    except ImportError as exc:
        raise SlurmError(
            f"slurm.backend = \"pyslurm\" but pyslurm cannot be imported ({exc}); install the pyslurm release that "
            "matches this site's Slurm exactly, or use backend \"cli\""
        ) from None
    return pyslurm


def _gres_from_dict(value: Any) -> tuple[Gres, ...]:
    """pyslurm's gres dicts: ``{"gpu:a100": 1}`` or ``{"gpu": 2}``."""
    if not value:
        return ()
    if isinstance(value, str):
        return parse.parse_gres(value)
    out = []
    for key, count in dict(value).items():
        name, _, gtype = str(key).partition(":")
        out.append(Gres(name=name, type=gtype or None, count=int(count or 0)))
    return tuple(out)


def _hostlist_text(value: Any) -> str:
    """pyslurm gives a job's required or excluded nodes as a list of names or as Slurm's hostlist string."""
    if isinstance(value, (list, tuple)):
        return ",".join(parse.text(v) for v in value)
    return parse.text(value)


def _opt_int(value: Any) -> int | None:
    return parse.num(value)


def job_from_pyslurm(j: Any) -> Job:
    state, flags = parse.split_job_state(getattr(j, "state", "UNKNOWN"))
    reason = parse.text(getattr(j, "state_reason", "")) or "None"
    priority = _opt_int(getattr(j, "priority", 0)) or 0
    cpus = _opt_int(getattr(j, "cpus", 1)) or 1
    node_count = _opt_int(getattr(j, "num_nodes", 1)) or 1
    per_node = _opt_int(getattr(j, "memory_per_node", None))
    per_cpu = _opt_int(getattr(j, "memory_per_cpu", None))
    memory = per_node or (per_cpu * max(1, cpus // node_count) if per_cpu else None)
    tasks_waiting = parse.text(getattr(j, "array_tasks_waiting", None))
    parallel = _opt_int(getattr(j, "array_tasks_parallel", None))
    if tasks_waiting and parallel:
        tasks_waiting = f"{tasks_waiting}%{parallel}"
    task_id = _opt_int(getattr(j, "array_task_id", None))
    array_id = _opt_int(getattr(j, "array_id", None))
    het_id = _opt_int(getattr(j, "heterogeneous_id", None)) or None
    constraints = getattr(j, "constraints", None) or []
    return Job(
        job_id=int(j.id),
        name=parse.text(getattr(j, "name", "")),
        user=parse.text(getattr(j, "user_name", "")),
        account=parse.text(getattr(j, "account", "")),
        partitions=parse.str_list(getattr(j, "partition", "")),
        state=state,
        state_flags=flags,
        reason=reason,
        qos=parse.text(getattr(j, "qos", "")),
        priority=priority,
        submit_time=parse.time_or_none(getattr(j, "submit_time", None)),
        eligible_time=parse.time_or_none(getattr(j, "eligible_time", None)),
        start_time=parse.time_or_none(getattr(j, "start_time", None)),
        end_time=parse.time_or_none(getattr(j, "end_time", None)),
        time_limit_min=_opt_int(getattr(j, "time_limit", None)),
        nodes=parse.text(getattr(j, "allocated_nodes", "")),
        node_count=node_count,
        cpus=cpus,
        memory_mb=memory,
        gres=_gres_from_dict(getattr(j, "gres_per_node", None)),
        features="&".join(constraints) if isinstance(constraints, list) else parse.text(constraints),
        restart_count=_opt_int(getattr(j, "requeue_count", 0)) or 0,
        comment=parse.text(getattr(j, "comment", "")),
        array_job_id=array_id if (tasks_waiting or task_id is not None) else None,
        array_task_id=None if tasks_waiting else task_id,
        array_tasks=tasks_waiting,
        het_job_id=het_id,
        het_job_offset=(_opt_int(getattr(j, "heterogeneous_offset", None)) or 0) if het_id else None,
        hold=reason in ("JobHeldUser", "JobHeldAdmin") and priority == 0,
        deadline=parse.time_or_none(getattr(j, "deadline", None)),
        required_nodes=_hostlist_text(getattr(j, "required_nodes", None)),
        excluded_nodes=_hostlist_text(getattr(j, "excluded_nodes", None)),
        reservation=parse.text(getattr(j, "reservation", None)),
    )


def node_from_pyslurm(n: Any) -> Node:
    state, flags = parse.split_node_state(parse.text(getattr(n, "state", "UNKNOWN")))
    return Node(
        name=parse.text(n.name),
        state=state,
        flags=flags,
        partitions=parse.str_list(getattr(n, "partitions", None)),
        features=parse.str_list(getattr(n, "active_features", None) or getattr(n, "available_features", None)),
        gres=_gres_from_dict(getattr(n, "configured_gres", None)),
        address=parse.text(getattr(n, "address", "")),
        hostname=parse.text(getattr(n, "hostname", "")),
        cpus=_opt_int(getattr(n, "total_cpus", 0)) or 0,
        memory_mb=_opt_int(getattr(n, "real_memory_raw", 0)) or 0,
        reason=parse.text(getattr(n, "reason", "")),
        boot_time=parse.time_or_none(getattr(n, "boot_time_raw", None)),
        instance_id=parse.text(getattr(n, "instance_id", "")),
    )


def partition_from_pyslurm(p: Any) -> Partition:
    return Partition(
        name=parse.text(p.name),
        nodes=parse.text(getattr(p, "nodes", "")),
        state=parse.text(getattr(p, "state", "UP")).upper() or "UP",
        max_time_min=_opt_int(getattr(p, "max_time_limit", None)),
        default=bool(getattr(p, "is_default", False)),
        total_cpus=_opt_int(getattr(p, "total_cpus", 0)) or 0,
        total_nodes=_opt_int(getattr(p, "total_nodes", 0)) or 0,
    )


def _values(collection: Any) -> list[Any]:
    """pyslurm collections are dict-like (possibly keyed by cluster); accept lists too."""
    if hasattr(collection, "values"):
        return list(collection.values())
    return list(collection)


class PyslurmAdapter(PartitionEdits, NoSlurmdbd, NoHealthProbe, HeadScontrol):
    """Slurm through libslurm (pyslurm); the cloud gate, for which pyslurm has no call, through the head's
    ``scontrol`` (``HeadScontrol``)."""

    backend = "pyslurm"

    def __init__(self, config: SlurmConfig | None = None, *, module: ModuleType | Any | None = None) -> None:
        self.config = config or SlurmConfig(backend="pyslurm")
        self.pyslurm = module if module is not None else import_pyslurm()

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError):
            raise
        except Exception as exc:  # pyslurm.RPCError and friends: keep Slurm's words
            raise SlurmError(f"pyslurm {what} failed: {exc}") from None

    def snapshot(self) -> Snapshot:
        taken = time.time()
        ps = self.pyslurm
        jobs = [job_from_pyslurm(j) for j in _values(self._call("Jobs.load", ps.Jobs.load))]
        nodes = [node_from_pyslurm(n) for n in _values(self._call("Nodes.load", ps.Nodes.load))]
        parts = [partition_from_pyslurm(p) for p in _values(self._call("Partitions.load", ps.Partitions.load))]
        return Snapshot(
            taken_at=taken,
            jobs=tuple(sorted((j for j in jobs if j.is_active), key=lambda j: j.job_id)),
            nodes=tuple(sorted(nodes, key=lambda n: n.name)),
            partitions=tuple(parts),
            slurm_version=parse.text(getattr(ps, "__version__", "")),
            source="pyslurm",
        )

    # ------------------------------------------------------------------ jobs
    def _job_partitions(self, job_id: int) -> list[str]:
        job = self._call("Job.load", self.pyslurm.Job.load, _job_id(job_id))
        return list(parse.str_list(job.partition))

    def set_partitions(self, job_id: int, partitions: list[str]) -> None:
        if not partitions:
            raise ValueError("a job needs at least one partition")
        names = list(dict.fromkeys(check_name("partition", p, PARTITION_RE) for p in partitions))
        changes = self.pyslurm.JobSubmitDescription(partitions=names)
        self._call("Job.modify", self.pyslurm.Job(_job_id(job_id)).modify, changes)

    def requeue(self, job_id: int, *, expedite: bool = False) -> None:
        self._call("Job.requeue", self.pyslurm.Job(_job_id(job_id)).requeue)
        if expedite:  # eligible at once, as `scontrol update jobid=N starttime=now`
            self.start_now(job_id)

    def start_now(self, job_id: int) -> None:
        import time

        changes = self.pyslurm.JobSubmitDescription(begin_time=int(time.time()) + REQUEUE_START_GAP_S)
        self._call("Job.modify", self.pyslurm.Job(_job_id(job_id)).modify, changes)

    def release_hold(self, job_id: int) -> None:
        self._call("Job.release", self.pyslurm.Job(_job_id(job_id)).release)

    def job_state(self, job_id: int) -> str | None:
        try:
            job = self._call("Job.load", self.pyslurm.Job.load, _job_id(job_id))
        except SlurmError:
            return None
        state, _flags = parse.split_job_state(getattr(job, "state", ""))
        return state or None

    def signal(self, job_id: int, signal: str, *, batch: bool = False, full: bool = False) -> None:
        steps = "batch" if batch else "all" if full else "children"
        self._call("Job.send_signal", self.pyslurm.Job(_job_id(job_id)).send_signal, _signal(signal), steps=steps)

    # ------------------------------------------------------------------ nodes
    def _modify_nodes(self, nodes: list[str], **changes: Any) -> None:
        _hostlist(nodes)
        delta = self.pyslurm.Node()
        for key, value in changes.items():
            setattr(delta, key, value)
        for expr in [nodes] if isinstance(nodes, str) else nodes:
            self._call("Node.modify", self.pyslurm.Node(expr).modify, delta)

    def drain(self, nodes: list[str], reason: str) -> None:
        if not reason.strip():
            raise ValueError("draining a node needs a reason")
        self._modify_nodes(nodes, state="DRAIN", reason=check_reason(reason))

    def resume(self, nodes: list[str]) -> None:
        self._modify_nodes(nodes, state="RESUME")

    def clear_reason(self, nodes: list[str]) -> None:
        # pyslurm sends "" as NULL (no change); slurmctld stores a blank reason as none (as ``scontrol
        # update reason=" "`` shows on 22.05)
        self._modify_nodes(nodes, reason=" ")

    def power_down(self, nodes: list[str], *, force: bool = False, reason: str = "") -> None:
        changes: dict[str, Any] = {"state": "POWER_DOWN_FORCE" if force else "POWER_DOWN_ASAP"}
        if reason:
            changes["reason"] = check_reason(reason)
        self._modify_nodes(nodes, **changes)

    def power_up(self, nodes: list[str]) -> None:
        self._modify_nodes(nodes, state="POWER_UP")

    def set_instance(self, node: str, instance_id: str, instance_type: str) -> bool:
        """pyslurm 25.11's Node has no writable instance fields: use the cli backend for it."""
        check_name("node", node)
        return False

    def set_node_address(self, node: str, address: str, hostname: str | None = None) -> None:
        check_name("node", node)
        if not ADDRESS_RE.fullmatch(address):
            raise ValueError(f"invalid node address {address!r}")
        changes: dict[str, Any] = {"address": address}
        if hostname is not None:
            changes["hostname"] = check_name("hostname", hostname)
        self._modify_nodes([node], **changes)
