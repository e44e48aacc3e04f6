"""The pyslurm backend, tested against RECORDED OBJECT SHAPES, not a live libslurm.

PyPI only has pyslurm 25.11, which needs Slurm 25.11 exactly; this machine runs 22.05. So these tests build
fakes that look like pyslurm 25.11's ``Job``/``Node``/``Partition`` objects (same attribute names, same
value conventions: ``state`` from slurm_job_state_string, node state "IDLE+CLOUD+POWERED_DOWN", gres as
``{"gpu:a100": 1}``, None for unset numbers, "UNLIMITED" for an infinite partition limit), filled from the
24.11/26.05 fixture JSON, and check that the backend produces the same domain objects as the JSON path.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from burstd.config import SlurmConfig
from burstd.slurm import parse
from burstd.slurm.pyslurm_backend import PyslurmAdapter
from tests.conftest import FIXTURES

# slurm_job_state_string() prints the first set flag of this list instead of the base state
_C_FLAG_ORDER = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                 "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING", "POWER_UP_NODE")


def _n(v):
    return parse.num(v)


def _t(v):
    return parse.time_or_none(v)


def recorded_job(r: dict) -> SimpleNamespace:
    states = r["job_state"]
    shown = next((f for f in _C_FLAG_ORDER if f in states[1:]), states[0])
    gres = {}
    for g in parse.parse_gres(r.get("tres_per_node")):
        gres[g.name + (f":{g.type}" if g.type else "")] = g.count
    tasks = r.get("array_task_string") or None
    return SimpleNamespace(
        id=r["job_id"], name=r["name"], user_name=r["user_name"], account=r["account"] or None,
        partition=r["partition"], qos=r["qos"] or None, priority=_n(r["priority"]), state=shown,
        state_reason=r["state_reason"], submit_time=_t(r["submit_time"]), eligible_time=_t(r["eligible_time"]),
        start_time=_t(r["start_time"]), end_time=_t(r["end_time"]),
        time_limit=_n(r["time_limit"]), allocated_nodes=r["nodes"] or None, num_nodes=_n(r["node_count"]),
        cpus=_n(r["cpus"]), memory_per_cpu=_n(r["memory_per_cpu"]) or None,
        memory_per_node=_n(r["memory_per_node"]) or None, gres_per_node=gres,
        constraints=[r["features"]] if r["features"] else [], requeue_count=r["restart_cnt"],
        comment=r["comment"] or None, array_id=_n(r["array_job_id"]) or None, array_task_id=_n(r["array_task_id"]),
        array_tasks_waiting=tasks.split("%")[0] if tasks else None,
        array_tasks_parallel=(_n(r["array_max_tasks"]) or None) if tasks else None,
        heterogeneous_id=_n(r["het_job_id"]) or None, heterogeneous_offset=_n(r["het_job_offset"]) or None,
        deadline=_t(r["deadline"]), required_nodes=r.get("required_nodes") or None,
        excluded_nodes=r.get("excluded_nodes") or None, reservation=r.get("resv_name") or None,
    )


def recorded_node(r: dict) -> SimpleNamespace:
    gres = {}
    for g in parse.parse_gres(r.get("gres")):
        gres[g.name + (f":{g.type}" if g.type else "")] = g.count
    return SimpleNamespace(
        name=r["name"], state="+".join(r["state"]), partitions=r["partitions"], active_features=r["active_features"],
        available_features=r["features"], configured_gres=gres, address=r["address"], hostname=r["hostname"],
        total_cpus=r["cpus"], real_memory_raw=r["real_memory"], reason=r["reason"] or None,
        boot_time_raw=_t(r["boot_time"]), instance_id=r.get("instance_id") or None,
    )


def recorded_partition(r: dict) -> SimpleNamespace:
    t = r["maximums"]["time"]
    return SimpleNamespace(
        name=r["name"], nodes=r["nodes"]["configured"], state=r["partition"]["state"][0],
        max_time_limit="UNLIMITED" if t.get("infinite") else _n(t), is_default="DEFAULT" in (r.get("flags") or []),
        total_cpus=r["cpus"]["total"], total_nodes=r["nodes"]["total"],
    )


class RecordedPyslurm:
    """A stand-in for the ``pyslurm`` module: loads return recorded shapes; changes are recorded."""

    __version__ = "25.11.0"

    def __init__(self, base):
        self.calls: list[tuple] = []
        doc = lambda name: parse.load_json((base / name).read_bytes(), name)  # noqa: E731
        jobs = {r["job_id"]: recorded_job(r) for r in doc("squeue_t_all.json")["jobs"]}
        nodes = {r["name"]: recorded_node(r) for r in doc("scontrol_show_nodes.json")["nodes"]}
        parts = {r["name"]: recorded_partition(r) for r in doc("scontrol_show_partitions.json")["partitions"]}
        outer = self

        class Jobs:
            @staticmethod
            def load():
                return jobs

        class Nodes:
            @staticmethod
            def load():
                return nodes

        class Partitions:
            @staticmethod
            def load():
                return parts

        class Job:
            def __init__(self, job_id):
                self.id = job_id

            @staticmethod
            def load(job_id):
                if job_id not in jobs:
                    raise RuntimeError(f"Invalid job id specified ({job_id})")
                return jobs[job_id]

            def modify(self, changes):
                outer.calls.append(("Job.modify", self.id, changes.kw))

            def requeue(self, hold=False):
                outer.calls.append(("Job.requeue", self.id))

            def send_signal(self, signal, steps="children", hurry=False):
                outer.calls.append(("Job.send_signal", self.id, signal, steps))

        class JobSubmitDescription:
            def __init__(self, **kw):
                self.kw = kw

        class Node:
            def __init__(self, name=None):
                self.name = name

            def modify(self, changes):
                outer.calls.append(("Node.modify", self.name, {k: v for k, v in vars(changes).items() if k != "name"}))

        self.Jobs, self.Nodes, self.Partitions = Jobs, Nodes, Partitions
        self.Job, self.JobSubmitDescription, self.Node = Job, JobSubmitDescription, Node


@pytest.fixture(params=["24.11", "26.05"])
def recorded(request):
    base = FIXTURES / request.param
    return base, RecordedPyslurm(base)


def test_recorded_shapes_give_the_same_snapshot_as_json(recorded):
    base, module = recorded
    snap = PyslurmAdapter(SlurmConfig(backend="pyslurm"), module=module).snapshot()
    docs = [(f, parse.load_json((base / f).read_bytes(), f))
            for f in ("squeue_t_all.json", "scontrol_show_nodes.json", "scontrol_show_partitions.json")]
    want = parse.snapshot_from_docs(docs, taken_at=0, source="json")
    # pyslurm's Job.state is slurm_job_state_string(): one flag at most, so flags are compared separately
    assert [replace(j, state_flags=()) for j in snap.jobs] == [replace(j, state_flags=()) for j in want.jobs]
    for got, exp in zip(snap.jobs, want.jobs):
        assert set(got.state_flags) <= set(exp.state_flags)
    assert snap.nodes == want.nodes
    assert snap.partitions == want.partitions
    assert snap.source == "pyslurm"


def test_recorded_shapes_jobs_of_note(recorded):
    _, module = recorded
    jobs = {j.name: j for j in PyslurmAdapter(module=module).snapshot().jobs if j.array_task_id is None}
    assert jobs["gpu_cloud"].state == "RUNNING" and "CONFIGURING" in jobs["gpu_cloud"].state_flags
    assert jobs["gpu_cloud"].gpus == 1 and str(jobs["gpu_cloud"].gres[0]) == "gpu:a100:1"
    assert jobs["multi_part"].partitions == ("onprem", "cloud")
    assert jobs["arr_cloud"].array_tasks == "1-3%1" and jobs["held_user"].hold


def test_recorded_shapes_actions(recorded):
    _, module = recorded
    a = PyslurmAdapter(module=module)
    a.add_partition(10, "onprem")  # multi_part is already on onprem,cloud: nothing to do
    a.remove_partition(10, "cloud")
    a.requeue(6)
    a.signal(5, "USR1", batch=True)
    a.drain(["c1"], "maintenance window")
    a.power_down(["c2"], force=True)
    a.set_node_address("c3", "10.0.0.3", "vm3")
    a.clear_reason(["c4"])
    assert module.calls == [
        ("Job.modify", 10, {"partitions": ["onprem"]}),
        ("Job.requeue", 6),
        ("Job.send_signal", 5, "USR1", "batch"),
        ("Node.modify", "c1", {"state": "DRAIN", "reason": "maintenance window"}),
        ("Node.modify", "c2", {"state": "POWER_DOWN_FORCE"}),
        ("Node.modify", "c3", {"address": "10.0.0.3", "hostname": "vm3"}),
        ("Node.modify", "c4", {"reason": " "}),  # pyslurm sends "" as "no change"
    ]


def test_recorded_shapes_errors_become_slurm_errors(recorded):
    from burstd.slurm.base import SlurmError

    _, module = recorded
    with pytest.raises(SlurmError, match="Invalid job id"):
        PyslurmAdapter(module=module).add_partition(999, "cloud")
    with pytest.raises(ValueError):
        PyslurmAdapter(module=module).set_partitions(10, ["bad name"])


def test_the_pyslurm_backend_runs_the_cloud_gate_through_the_heads_scontrol(recorded, tmp_path):
    """pyslurm has no call for a partition's account lists, reservations or a hold with its reason: like the rest
    backend it makes them with the head's scontrol, so the gate holds on this backend too (issue 21)."""
    from burstd.daemon.cloud_gate import GateSlurm
    from burstd.domain.partition_access import PartitionAccess
    from tests.unit.slurm.test_slurm_rest_backend import fake_scontrol

    _, module = recorded
    calls = tmp_path / "calls"
    bindir = fake_scontrol(tmp_path, f"import sys\nopen({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                                     "if sys.argv[1:3] == ['show', 'partition']:\n"
                                     "    print('PartitionName=cloud AllowAccounts=ALL DenyAccounts=broke "
                                     "Nodes=cloud[1-4]')\n")
    a = PyslurmAdapter(SlurmConfig(backend="pyslurm", bin_dir=str(bindir)), module=module)
    assert isinstance(a, GateSlurm)  # the daemon's gate engages on this backend
    assert a.partition_access("cloud") == PartitionAccess(allow=None, deny=("broke",))
    a.set_partition_access("cloud", PartitionAccess(allow=None, deny=("broke", "chem")))
    a.hold_with_reason(42, "burstd: account chem has no money left")
    with pytest.raises(ValueError):
        a.hold_with_reason(-1, "x")
    lines = calls.read_text().splitlines()
    assert lines[0] == "show partition cloud -o" and "hold 42" in lines and len(lines) == 4, lines
    assert any(line.startswith("update PartitionName=cloud") and "DenyAccounts=broke,chem" in line for line in lines)
    assert not [c for c in module.calls if "hold" in str(c).lower()]  # libslurm was not asked for what it lacks
