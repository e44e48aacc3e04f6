"""Every JSON file under tests/data/slurm-fixtures (24.11 and 26.05; CLI and REST; every data parser;
snapshot 2) parses, and the values match what the fixture README says.

Job ids differ between versions, so the expectations are keyed by job name (README table).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burstd.slurm import parse
from burstd.domain.hostlist import expand
from burstd.slurm.rest import newest_served
from tests.conftest import FIXTURES

ALL_JSON = sorted(FIXTURES.rglob("*.json"))
DATA_JSON = [p for p in ALL_JSON if p.name != "openapi_v3.json"]


def _id(p: Path) -> str:
    return str(p.relative_to(FIXTURES))


def _doc(p: Path) -> dict:
    return parse.load_json(p.read_bytes(), str(p))


def _version(p: Path) -> str:
    return _id(p).split("/")[0]


def _is_snapshot2(p: Path) -> bool:
    return "snapshot2_cloud_up" in _id(p)


def test_the_fixture_tree_is_all_there():
    # 24.11 and 26.05, CLI and REST, several data parsers each, plus snapshot 2
    names = {_id(p) for p in ALL_JSON}
    for required in (
        "24.11/squeue_v0.0.40.json", "24.11/squeue_v0.0.41.json", "24.11/squeue_v0.0.42.json",
        "26.05/squeue_v0.0.42.json", "26.05/squeue_v0.0.43.json", "26.05/squeue_v0.0.44.json",
        "26.05/squeue_v0.0.45.json", "24.11/rest/v0.0.40_jobs.json", "26.05/rest/v0.0.45_nodes.json",
        "24.11/snapshot2_cloud_up/sinfo.json", "26.05/snapshot2_cloud_up/rest/v0.0.45_jobs.json",
    ):
        assert required in names
    assert len(DATA_JSON) >= 80


@pytest.mark.parametrize("path", DATA_JSON, ids=_id)
def test_every_fixture_parses(path):
    doc = _doc(path)
    snap = parse.snapshot_from_docs([(str(path), doc)], taken_at=0.0, source="test", active_only=False)
    assert snap.slurm_version == {"24.11": "24.11.5", "26.05": "26.05.5"}[_version(path)]
    # every job record became a Job (or the file is a /jobs/state listing)
    if parse.is_job_state_listing(doc):
        states = parse.job_states_from_doc(doc)
        assert len(states) == len(doc["jobs"]) and snap.jobs == ()
    else:
        assert len(snap.jobs) == len({r["job_id"] for r in doc.get("jobs") or []})
    if "nodes" in doc and doc["nodes"] and "name" in doc["nodes"][0]:
        assert {n.name for n in snap.nodes} == {r["name"] for r in doc["nodes"]}
    if "sinfo" in doc:
        assert {n.name for n in snap.nodes} == {"n1", "c1", "c2", "c3", "c4"}
    if "partitions" in doc:
        assert {p.name for p in snap.partitions} == {"onprem", "cloud"}


# ---------------------------------------------------------------------------------- jobs
# name -> expected fields (snapshot 1). "state" is the base state, "flags" the rest of job_state.
EXPECTED_JOBS: dict[str, dict] = {
    "done_ok": dict(state="COMPLETED", reason="None"),
    "done_fail": dict(state="FAILED", reason="NonZeroExitCode"),
    "timeout_job": dict(state="TIMEOUT", reason="TimeLimit"),
    "to_cancel": dict(state="CANCELLED", reason="JobHeldUser"),
    "long_run": dict(state="RUNNING", state_flags=(), reason="None", account="physics", nodes="n1", memory_mb=300,
                     time_limit_min=120, user="alice"),
    "sig_requeue": dict(state="PENDING", reason="BeginTime", restart_count=1, time_limit_min=30),
    "gpu_cloud": dict(state="RUNNING", state_flags=("CONFIGURING", "POWER_UP_NODE"), reason="None", nodes="c1",
                      partitions=("cloud",), gpus=1, gres="gpu:a100:1"),
    "multi_part": dict(state="PENDING", reason="BadConstraints", partitions=("onprem", "cloud"), features="x86"),
    "held_user": dict(state="PENDING", reason="JobHeldUser", hold=True, priority=0, time_limit_min=None,
                      comment="held by user"),
    "held_admin": dict(state="PENDING", reason="JobHeldAdmin", hold=True, priority=0),
    "begin_later": dict(state="PENDING", reason="BeginTime", hold=False),
    "bob_dep": dict(state="PENDING", reason="Dependency", user="bob", account="chemistry", cpus=2, memory_mb=200),
    "bob_excl": dict(state="PENDING", reason="Priority", user="bob", time_limit_min=1440),
    "too_long": dict(state="PENDING", reason="PartitionTimeLimit", partitions=("cloud",), time_limit_min=300),
    "het_pair": dict(state="PENDING", reason="Resources"),
}
SNAPSHOT2_OVERRIDES: dict[str, dict] = {
    "gpu_cloud": dict(state="RUNNING", state_flags=()),
    "cloud_excl": dict(state="RUNNING", state_flags=("CONFIGURING", "POWER_UP_NODE"), partitions=("cloud",)),
    "sig_requeue": dict(state="PENDING", restart_count=1),  # reason differs by version in snapshot 2
}

JOB_FILES = [p for p in DATA_JSON if "jobs" in json.loads(p.read_text()) and not parse.is_job_state_listing(_doc(p))]


def _check(job, expected: dict) -> None:
    for key, want in expected.items():
        if key == "gres":
            got = ",".join(str(g) for g in job.gres)
        else:
            got = getattr(job, key)
        assert got == want, f"job {job.job_id} ({job.name}) {key}: {got!r} != {want!r}"


@pytest.mark.parametrize("path", JOB_FILES, ids=_id)
def test_job_values_match_the_readme(path):
    jobs = parse.jobs_from_doc(_doc(path))
    assert jobs
    by_name: dict[str, list] = {}
    for j in jobs:
        by_name.setdefault(j.name, []).append(j)
        assert j.user in ("alice", "bob")
    table = dict(EXPECTED_JOBS)
    if _is_snapshot2(path):
        table.update(SNAPSHOT2_OVERRIDES)
        table["sig_requeue"] = SNAPSHOT2_OVERRIDES["sig_requeue"]
    for name, expected in table.items():
        for job in by_name.get(name, []):
            _check(job, expected)

    # arrays: the pending meta-record keeps its task string; started tasks are their own records
    for name, tasks, parent_label in (("arr_onprem", "1-9", "7"), ("arr_cloud", "1-3%1", "9")):
        recs = by_name.get(name, [])
        metas = [j for j in recs if j.array_tasks]
        started = [j for j in recs if j.array_task_id is not None]
        for m in metas:
            assert m.array_tasks == tasks and m.array_task_id is None and m.array_job_id == m.job_id
            assert m.state == "PENDING" and m.display_id == f"{parent_label}_[{tasks}]"
        for t in started:
            assert t.array_task_id == 0 and t.array_job_id == int(parent_label) and t.job_id != t.array_job_id
            assert t.state == "RUNNING" and t.display_id == f"{parent_label}_0"
    if "arr_cloud" in by_name and any(j.array_task_id == 0 for j in by_name["arr_cloud"]):
        task = next(j for j in by_name["arr_cloud"] if j.array_task_id == 0)
        want_flags = () if _is_snapshot2(path) else ("CONFIGURING", "POWER_UP_NODE")
        assert task.nodes == "c1" and task.state_flags == want_flags

    # het jobs: two records sharing het_job_id, offsets 0 and 1, the leader's id is the het id
    het = by_name.get("het_pair", [])
    if len(het) == 2:
        assert {j.het_job_offset for j in het} == {0, 1}
        assert len({j.het_job_id for j in het}) == 1
        leader = next(j for j in het if j.het_job_offset == 0)
        assert leader.het_job_id == leader.job_id
    for j in jobs:
        if j.name != "het_pair":
            assert j.het_job_id is None and j.het_job_offset is None

    # three_nodes: rejected (FAILED) on 24.11, pending PartitionConfig on 26.05
    for j in by_name.get("three_nodes", []):
        if _version(path) == "24.11":
            assert j.state == "FAILED"
        else:
            assert (j.state, j.reason) == ("PENDING", "PartitionConfig")


@pytest.mark.parametrize("version,count", [("24.11", 16), ("26.05", 17)])
def test_default_squeue_shows_only_unfinished_jobs(version, count):
    jobs = parse.jobs_from_doc(_doc(FIXTURES / version / "squeue.json"))
    assert len(jobs) == count
    assert all(j.is_active for j in jobs)
    every = parse.jobs_from_doc(_doc(FIXTURES / version / "squeue_t_all.json"))
    assert len(every) == 21
    assert {j.state for j in every if not j.is_active} >= {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"}


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_every_data_parser_gives_the_same_jobs(version):
    files = sorted((FIXTURES / version).glob("squeue_v0.0.*.json"))
    assert len(files) >= 3
    baseline = parse.jobs_from_doc(_doc(FIXTURES / version / "squeue.json"))
    for f in files:
        assert parse.jobs_from_doc(_doc(f)) == baseline, f.name


def _without_estimates(jobs):
    """The REST captures were taken moments after the CLI ones: a pending job's backfill estimate may differ."""
    from dataclasses import replace

    return [replace(j, start_time=None, end_time=None) if j.is_pending else j for j in jobs]


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_cli_and_rest_agree(version):
    rest_jobs = sorted((FIXTURES / version / "rest").glob("v0.0.*_jobs.json"))
    baseline = _without_estimates(parse.jobs_from_doc(_doc(FIXTURES / version / "squeue_t_all.json")))
    for f in rest_jobs:
        assert _without_estimates(parse.jobs_from_doc(_doc(f))) == baseline, f.name
    nodes = parse.nodes_from_doc(_doc(FIXTURES / version / "scontrol_show_nodes.json"))
    for f in sorted((FIXTURES / version / "rest").glob("v0.0.*_nodes.json")):
        assert parse.nodes_from_doc(_doc(f)) == nodes, f.name


# ---------------------------------------------------------------------------------- nodes
EXPECTED_NODES_1 = {
    "n1": ("ALLOCATED", set()),
    "c1": ("ALLOCATED", {"CLOUD", "NOT_RESPONDING", "POWERING_UP"}),
    "c2": ("IDLE", {"CLOUD", "POWERED_DOWN"}),
    "c3": ("IDLE", {"CLOUD", "POWERED_DOWN"}),
    "c4": ("IDLE", {"CLOUD", "DRAIN", "POWERED_DOWN"}),
}
EXPECTED_NODES_2 = {
    "n1": ("ALLOCATED", set()),
    "c1": ("ALLOCATED", {"CLOUD"}),
    "c2": ("ALLOCATED", {"CLOUD", "NOT_RESPONDING", "POWERING_UP"}),
    "c3": ("IDLE", {"CLOUD", "POWERED_DOWN"}),
    "c4": ("IDLE", {"CLOUD", "DRAIN", "POWERED_DOWN"}),
}
NODE_FILES = [p for p in DATA_JSON if p.name in ("sinfo.json", "scontrol_show_nodes.json", "scontrol_show_node_c1.json")
              or p.name.endswith(("_nodes.json", "_node_c1.json"))]


@pytest.mark.parametrize("path", NODE_FILES, ids=_id)
def test_node_states_flags_and_cloud_details(path):
    doc = _doc(path)
    nodes = {n.name: n for n in parse.nodes_from_doc(doc)}
    expected = EXPECTED_NODES_2 if _is_snapshot2(path) else EXPECTED_NODES_1
    grouped = "sinfo" in doc
    for name, node in nodes.items():
        state, flags = expected[name]
        assert node.state == state and set(node.flags) == flags, name
        if name.startswith("c"):
            assert node.is_cloud and node.partitions == ("cloud",)
            assert set(node.features) == {"cloud", "gpu"}
            assert [str(g) for g in node.gres] == ["gpu:a100:2"]
            assert node.cpus == 2 and node.memory_mb == 1000
        else:
            assert node.partitions == ("onprem",) and set(node.features) == {"onprem", "x86"} and node.gres == ()
    if "c4" in nodes:
        assert nodes["c4"].reason == "maintenance window" and nodes["c4"].is_drained and nodes["c4"].is_powered_down
    if "c2" in nodes and not _is_snapshot2(path):
        assert nodes["c2"].is_powered_down and not nodes["c2"].is_drained
    if not grouped and "c1" in nodes:
        c1 = nodes["c1"]
        if _is_snapshot2(path):
            assert c1.address == "127.0.0.1" and c1.hostname == "vm" and c1.boot_time
            assert c1.instance_id == ("i-0c1fixture" if _version(path) == "24.11" else "")
        else:
            assert c1.address == "c1" and c1.is_powering_up  # never came up: address = node name


# ---------------------------------------------------------------------------------- partitions
PART_FILES = [p for p in DATA_JSON if "partitions" in p.name or p.name == "sinfo.json"]


@pytest.mark.parametrize("path", PART_FILES, ids=_id)
def test_partitions(path):
    parts = {p.name: p for p in parse.partitions_from_doc(_doc(path))}
    assert parts["onprem"].nodes == "n1" and parts["onprem"].max_time_min is None  # MaxTime=INFINITE
    assert expand(parts["cloud"].nodes) == ["c1", "c2", "c3", "c4"] and parts["cloud"].max_time_min == 120
    assert parts["cloud"].total_nodes == 4 and parts["cloud"].total_cpus == 8
    assert parts["onprem"].state == "UP"
    if _version(path) == "26.05":  # 24.11 has no partition flags at all
        assert parts["onprem"].default and not parts["cloud"].default


# ---------------------------------------------------------------------------------- REST spec
@pytest.mark.parametrize("version,newest", [("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
def test_newest_served_data_version_from_the_openapi_spec(version, newest):
    assert newest_served(_doc(FIXTURES / version / "rest" / "openapi_v3.json")) == newest


def test_slurm_version_from_both_envelopes():
    assert parse.slurm_version({"meta": {"Slurm": {"release": "22.05.8"}}}) == "22.05.8"
    assert parse.slurm_version({"meta": {"slurm": {"version": {"major": "26", "minor": "05", "micro": "5"}}}}) == "26.05.5"
