"""Slurm 22.05.8 output captured from the live test bed with real cloud bursting (tests/data/capture_2205.py):
snapshot1 right after a cloud job was allocated (job CONFIGURING, its node still flagged POWERED_DOWN, the
22.05 way of saying "mixed~"), snapshot2 once the node registered (address from cloud_reg_addrs) and the
job RUNNING. Every source (squeue text, squeue --json, slurmrestd v0.0.36/37/38) must give the same jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from burstd.slurm import parse, squeue_text
from burstd.slurm.replay import snapshot_from_files

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05-bed"
SNAPS = ["snapshot1", "snapshot2"]
JOB_SOURCES = ["squeue.json", "rest_v0.0.38_jobs.json", "rest_v0.0.37_jobs.json", "rest_v0.0.36_jobs.json"]


def _doc(snap: str, name: str) -> dict:
    return parse.load_json((DATA / snap / name).read_bytes(), name)


def _text(snap: str):
    return sorted(squeue_text.jobs_from_squeue_text((DATA / snap / "squeue_text.txt").read_text()), key=lambda j: j.job_id)


def _by_name(jobs):
    out: dict[str, list] = {}
    for j in jobs:
        out.setdefault(j.name, []).append(j)
    return out


@pytest.mark.parametrize("snap", SNAPS)
@pytest.mark.parametrize("source", JOB_SOURCES)
def test_every_source_gives_the_same_jobs(snap, source):
    jobs = sorted((j for j in parse.jobs_from_doc(_doc(snap, source)) if j.is_active), key=lambda j: j.job_id)
    assert jobs == _text(snap)


@pytest.mark.parametrize("snap", SNAPS)
@pytest.mark.parametrize("source", ["rest_v0.0.38_nodes.json", "rest_v0.0.37_nodes.json"])
def test_rest_nodes_equal_sinfo_nodes(snap, source):
    # in snapshot1, cloud1 registered between the sinfo and the REST capture: compare the nodes that stood still
    moving = {"cloud1"} if snap == "snapshot1" else set()
    rest = [n for n in parse.nodes_from_doc(_doc(snap, source)) if n.name not in moving]
    sinfo = [n for n in parse.nodes_from_doc(_doc(snap, "sinfo.json")) if n.name not in moving]
    assert rest == sinfo and len(rest) >= 5


@pytest.mark.parametrize("snap,flags,address", [("snapshot1", ("CONFIGURING",), "cloud1"),
                                                ("snapshot2", (), "10.119.0.101")])
def test_burst_job_and_its_cloud_node(snap, flags, address):
    s = snapshot_from_files([DATA / snap / f for f in ("squeue_text.txt", "sinfo.json",
                                                       "scontrol_show_partitions_o.txt")])
    gpu = _by_name(s.jobs)["gpu_cloud"][0]
    assert (gpu.state, gpu.state_flags, gpu.nodes, gpu.partitions) == ("RUNNING", flags, "cloud1", ("cloud",))
    node = s.node("cloud1")
    assert node.state == "MIXED" and node.is_cloud and node.address == address
    assert node.is_powered_down == (snap == "snapshot1")  # 22.05 keeps POWERED_DOWN until the node registers
    assert s.node("cloud4").is_drained and s.node("cloud4").reason == "maintenance window"
    assert s.node("cloud2").is_powered_down and not s.node("cloud2").is_drained
    assert s.node("onprem1").address == "10.119.0.11" and not s.node("onprem1").is_cloud


@pytest.mark.parametrize("snap", SNAPS)
def test_workload_values(snap):
    jobs = _by_name(_text(snap))
    meta = [j for j in jobs["arr_onprem"] if j.array_tasks]
    tasks = [j for j in jobs["arr_onprem"] if j.array_task_id is not None]
    assert len(meta) == 1 and meta[0].array_tasks == "3-9" and meta[0].state == "PENDING"
    assert sorted(t.array_task_id for t in tasks) == [0, 1, 2]
    assert all(t.array_job_id == meta[0].job_id and t.state == "RUNNING" and t.job_id != t.array_job_id for t in tasks)
    rq = jobs["sig_requeue"][0]
    assert (rq.state, rq.reason, rq.restart_count) == ("PENDING", "BeginTime", 1)
    bob = jobs["bob_dep"][0]
    assert (bob.user, bob.account, bob.reason, bob.cpus, bob.memory_mb) == ("burstuser2", "chemistry", "Dependency", 2, 200)
    assert jobs["long_run"][0].account == "physics" and jobs["long_run"][0].comment == "fixture long running"
    assert jobs["multi_part"][0].partitions == ("onprem", "cloud") and jobs["multi_part"][0].features == "cloud"
    assert jobs["held_admin"][0].reason == "JobHeldAdmin" and jobs["held_admin"][0].hold
    het = jobs["het_pair"]
    assert sorted((j.het_job_id, j.het_job_offset) for j in het) == [(het[0].job_id, 0), (het[0].job_id, 1)]
    evil = [j for j in _text(snap) if j.name.startswith("evil")][0]
    assert (evil.name, evil.comment, evil.account) == ('evil$(touch /tmp/pwned); echo "x"\n|',
                                                      '$(touch /tmp/pwned); echo "x"|', "acct$(id)")


@pytest.mark.parametrize("snap", SNAPS)
def test_partitions_text_and_rest(snap):
    text = parse.partitions_from_scontrol_text((DATA / snap / "scontrol_show_partitions_o.txt").read_text())
    assert parse.partitions_from_doc(_doc(snap, "rest_v0.0.38_partitions.json")) == text
    by = {p.name: p for p in text}
    assert by["onprem"].default and by["onprem"].nodes == "onprem[1-2]" and by["cloud"].nodes == "cloud[1-4]"
