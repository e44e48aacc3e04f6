"""Slurm 22.05 shapes, captured live from Debian 12's slurm 22.05.8 (tests/data/slurm-22.05/):
``squeue --json``, ``sinfo --json``, slurmrestd v0.0.36/37/38 jobs/nodes/partitions,
``scontrol show partitions -o`` and the cli backend's own ``squeue -O`` text.

The queue held: a running job with --comment/--account=physics, a pending array (0-9), a job on
``onprem,cloud``, user- and admin-held jobs, a --begin job, a dependent job with --mem-per-cpu, a job over
the partition time limit, a het job (20+21), and a held job whose name, comment and account carry shell
metacharacters and a newline. mbc4 was drained with reason "maintenance window".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burstd.slurm import parse, squeue_text
from burstd.slurm.replay import snapshot_from_files

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05"
EVIL_NAME = 'evil$(touch /tmp/pwned); echo "x"\n|'


def _doc(name: str) -> dict:
    return parse.load_json((DATA / name).read_bytes(), name)


def _active(jobs):
    return sorted((j for j in jobs if j.is_active), key=lambda j: j.job_id)


def _text_jobs():
    return sorted(squeue_text.jobs_from_squeue_text((DATA / "squeue_text.txt").read_text()), key=lambda j: j.job_id)


@pytest.mark.parametrize(
    "source", ["squeue.json", "rest_v0.0.38_jobs.json", "rest_v0.0.37_jobs.json", "rest_v0.0.36_jobs.json"]
)
def test_text_path_and_every_json_form_give_the_same_jobs(source):
    assert _active(parse.jobs_from_doc(_doc(source))) == _text_jobs()


def test_2205_json_ignores_the_state_filter_so_the_adapter_filters():
    # 22.05 dumps every job it still remembers; only active ones reach the snapshot
    doc = _doc("squeue.json")
    assert doc["meta"]["Slurm"]["release"] == "22.05.8"
    assert isinstance(doc["jobs"][0]["job_state"], str)  # a string, not a list, in 22.05


def test_shell_metacharacters_and_newlines_round_trip_unchanged():
    for jobs in (_text_jobs(), _active(parse.jobs_from_doc(_doc("squeue.json")))):
        evil = next(j for j in jobs if j.name.startswith("evil"))
        assert evil.name == EVIL_NAME
        assert evil.comment == '$(touch /tmp/pwned); echo "x"|'
        assert evil.account == "acct$(id)"
        assert evil.hold and evil.reason == "JobHeldUser"


EXPECTED = {
    "long_run": dict(state="RUNNING", nodes="mb1", account="physics", comment="fixture long running",
                     memory_mb=300, time_limit_min=120),
    "arr_onprem": dict(state="PENDING", reason="Resources", array_tasks="0-9", array_task_id=None,
                       time_limit_min=10),
    "multi_part": dict(state="PENDING", reason="BadConstraints", partitions=("onprem", "cloud"), features="x86"),
    "held_user": dict(state="PENDING", reason="JobHeldUser", hold=True, priority=0, comment="held by user"),
    "held_admin": dict(state="PENDING", reason="JobHeldAdmin", hold=True, priority=0),
    "begin_later": dict(state="PENDING", reason="BeginTime", time_limit_min=None, end_time=None),
    "bob_dep": dict(state="PENDING", reason="Dependency", account="chemistry", cpus=2, memory_mb=200),
    "too_long": dict(state="PENDING", reason="PartitionTimeLimit", partitions=("cloud",), time_limit_min=300),
}


@pytest.mark.parametrize("name,expected", list(EXPECTED.items()))
def test_2205_job_values(name, expected):
    job = next(j for j in _text_jobs() if j.name == name)
    for key, want in expected.items():
        assert getattr(job, key) == want, key
    if job.array_tasks:
        assert job.array_job_id == job.job_id and job.display_id == f"{job.job_id}_[0-9]"


def test_2205_het_job():
    het = [j for j in _text_jobs() if j.name == "het.sh"]
    assert [(j.het_job_id, j.het_job_offset) for j in het] == [(20, 0), (20, 1)]


def test_2205_nodes_string_state_plus_state_flags():
    nodes = {n.name: n for n in parse.nodes_from_doc(_doc("sinfo.json"))}
    assert nodes["mb1"].state == "MIXED" and nodes["mb1"].address == "127.0.0.1"
    assert nodes["mbc4"].state == "IDLE" and set(nodes["mbc4"].flags) == {"CLOUD", "DRAIN", "POWERED_DOWN"}
    assert nodes["mbc4"].reason == "maintenance window"
    assert nodes["mbc1"].is_cloud and nodes["mbc1"].is_powered_down and nodes["mbc1"].address == "mbc1"
    assert nodes["mbc1"].features == ("cloud", "gpu") and nodes["mbc1"].partitions == ("cloud",)
    assert parse.nodes_from_doc(_doc("rest_v0.0.38_nodes.json")) == list(nodes.values())


@pytest.mark.parametrize(
    "source", ["rest_v0.0.38_partitions.json", "rest_v0.0.37_partitions.json", "rest_v0.0.36_partitions.json"]
)
def test_2205_partitions_text_and_flat_rest_agree(source):
    text = parse.partitions_from_scontrol_text((DATA / "scontrol_show_partitions_o.txt").read_text())
    assert parse.partitions_from_doc(_doc(source)) == text
    by = {p.name: p for p in text}
    assert by["onprem"].default and by["onprem"].max_time_min is None and by["onprem"].nodes == "mb1"
    assert by["cloud"].max_time_min == 120 and by["cloud"].nodes == "mbc[1-4]" and by["cloud"].total_cpus == 8


def test_replay_of_a_2205_capture_from_files():
    snap = snapshot_from_files(
        [DATA / "squeue_text.txt", DATA / "sinfo.json", DATA / "scontrol_show_partitions_o.txt"]
    )
    assert snap.slurm_version == "22.05.8"
    assert len(snap.jobs) == 11 and len(snap.nodes) == 5 and {p.name for p in snap.partitions} == {"onprem", "cloud"}
    assert snap.node("mbc4").is_drained


def test_json_dump_of_a_snapshot_is_plain_json():
    snap = snapshot_from_files([DATA / "squeue.json", DATA / "sinfo.json"])
    data = json.loads(json.dumps(parse.snapshot_as_dict(snap)))
    evil = next(j for j in data["jobs"] if j["name"].startswith("evil"))
    assert evil["name"] == EVIL_NAME
    assert {n["name"] for n in data["nodes"]} == {"mb1", "mbc1", "mbc2", "mbc3", "mbc4"}
