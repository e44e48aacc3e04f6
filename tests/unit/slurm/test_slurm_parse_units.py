"""Small tables for the parser's building blocks: numbers, states, gres, time limits, the text format."""

from __future__ import annotations

import pytest

from burstd.domain.slurm import Gres
from burstd.slurm import parse, squeue_text

NUMS = [
    (5, 5), (None, None), ({"set": True, "infinite": False, "number": 7}, 7),
    ({"set": False, "infinite": False, "number": 0}, None), ({"set": True, "infinite": True, "number": 0}, None),
    (0xFFFFFFFE, None), (0xFFFFFFFF, None), ("12", 12), ("N/A", None), ("(null)", None), (True, None),
    ({"set": True, "infinite": False, "number": 1.5}, 1),
]


@pytest.mark.parametrize("raw,want", NUMS)
def test_num(raw, want):
    assert parse.num(raw) == want


@pytest.mark.parametrize(
    "raw,want",
    [(0, None), (1795301514, 1795301514), (6090275950, None), ({"set": True, "infinite": False, "number": 0}, None)],
)
def test_times_zero_and_never_are_none(raw, want):
    assert parse.time_or_none(raw) == want


JOB_STATES = [
    (["RUNNING", "CONFIGURING", "POWER_UP_NODE"], ("RUNNING", ("CONFIGURING", "POWER_UP_NODE"))),
    (["PENDING"], ("PENDING", ())),
    ("PENDING", ("PENDING", ())),
    ("CONFIGURING", ("RUNNING", ("CONFIGURING",))),  # 22.05 prints the flag instead of the base state
    ("POWER_UP_NODE", ("RUNNING", ("POWER_UP_NODE",))),
    ("COMPLETING", ("COMPLETING", ("COMPLETING",))),
    ("REQUEUE_HOLD", ("PENDING", ("REQUEUE_HOLD",))),
    ("PD", ("PENDING", ())),
    ([], ("UNKNOWN", ())),
]


@pytest.mark.parametrize("raw,want", JOB_STATES)
def test_job_state(raw, want):
    assert parse.split_job_state(raw) == want


NODE_STATES = [
    (("idle", ["CLOUD", "POWERED_DOWN"]), ("IDLE", ("CLOUD", "POWERED_DOWN"))),
    ((["IDLE", "CLOUD", "DRAIN", "POWERED_DOWN"], None), ("IDLE", ("CLOUD", "DRAIN", "POWERED_DOWN"))),
    (("ALLOCATED+CLOUD+POWERING_UP", None), ("ALLOCATED", ("CLOUD", "POWERING_UP"))),
    (("mixed", []), ("MIXED", ())),
]


@pytest.mark.parametrize("raw,want", NODE_STATES)
def test_node_state(raw, want):
    assert parse.split_node_state(*raw) == want


GRES = [
    ("gres/gpu:a100:1", (Gres("gpu", "a100", 1),)),
    ("gres:gpu:a100:1", (Gres("gpu", "a100", 1),)),
    ("gpu:a100:2(S:0-1)", (Gres("gpu", "a100", 2),)),
    ("gpu:2", (Gres("gpu", None, 2),)),
    ("gpu", (Gres("gpu", None, 1),)),
    ("gres/gpu:2,gres/shard:4", (Gres("gpu", None, 2), Gres("shard", None, 4))),
    ("N/A", ()), ("", ()), (None, ()),
]


@pytest.mark.parametrize("raw,want", GRES)
def test_gres(raw, want):
    assert parse.parse_gres(raw) == want


@pytest.mark.parametrize(
    "raw,want",
    [("30:00", 30), ("2:00:00", 120), ("1-00:00:00", 1440), ("UNLIMITED", None), ("5", 5), ("1-2", 1560),
     ("0:30", 1), ("10:00", 10)],
)
def test_time_limit_text(raw, want):
    assert parse.parse_time_limit(raw) == want


# ------------------------------------------------------------------ the squeue -O text format
US, RS = squeue_text.FIELD_SEP, squeue_text.RECORD_END
N = len(squeue_text.SQUEUE_TEXT_FIELDS)


def record(**over: str) -> str:
    base = dict(
        JobID="42", ArrayJobID="42", ArrayTaskID="N/A", HetJobID="N/A", HetJobOffset="N/A", UserName="alice",
        Account="physics", Partition="onprem,cloud", QOS="normal", PriorityLong="1000", SubmitTime="1795301514",
        EligibleTime="1795301514", StartTime="1795309999", EndTime="1795313599", TimeLimit="1:00:00",
        NodeList="", NumNodes="1", NumCPUs="4", MinMemory="1G", **{"tres-alloc": "cpu=4,mem=1G,node=1"},
        **{"tres-per-node": "gres:gpu:a100:1", "tres-per-job": "N/A"}, Feature="x86", State="PENDING",
        Reason="Resources", RestartCnt="2", Comment="hello", Name="train", Deadline="N/A", ReqNodes="",
        Reservation="(null)", ExcNodes="",
    )
    base.update(over)
    return US.join(base[f] for f in squeue_text.SQUEUE_TEXT_FIELDS) + RS + "\n"


def test_text_record_fields():
    [job] = squeue_text.jobs_from_squeue_text(record())
    assert (job.job_id, job.user, job.account, job.partitions, job.qos) == (42, "alice", "physics", ("onprem", "cloud"), "normal")
    assert (job.priority, job.start_time, job.time_limit_min, job.cpus, job.memory_mb) == (1000, 1795309999, 60, 4, 1024)
    assert (job.gpus, job.features, job.restart_count, job.comment, job.name) == (1, "x86", 2, "hello", "train")
    assert job.array_job_id is None and job.het_job_id is None and not job.hold


@pytest.mark.parametrize(
    "name",
    ['a$(touch /tmp/pwned); echo "x"\n|', "tab\tand\\backslash", "line1\nline2\n", "%j %x", "'quoted'", "ünï"],
)
def test_free_text_round_trips_through_the_text_format(name):
    [job] = squeue_text.jobs_from_squeue_text(record(Name=name, Comment=name + "c", Account="a" + name))
    assert (job.name, job.comment, job.account) == (name, name + "c", "a" + name)


@pytest.mark.parametrize(
    "output",
    [
        record(Name="has" + US + "separator"),  # one field too many
        record(Comment="ends" + RS + "\nearly"),  # splits one record into two short ones
        record()[:-1],  # missing the final newline
        record(SubmitTime="yesterday"),  # a number field that is not a number
        record(JobID="x"),
        record() + "garbage\n",
    ],
)
def test_text_records_that_do_not_split_cleanly_are_refused(output):
    with pytest.raises(squeue_text.TextParseError):
        squeue_text.jobs_from_squeue_text(output)


def test_text_format_argument_never_truncates_fields():
    fmt = squeue_text.squeue_text_format()
    assert fmt.count(":0") == N and fmt.endswith("ExcNodes:0" + RS) and "," not in fmt.replace(US + ",", "")


def test_array_meta_and_task_in_text():
    meta, task = squeue_text.jobs_from_squeue_text(
        record(JobID="7", ArrayJobID="7", ArrayTaskID="1-9%2") + record(JobID="21", ArrayJobID="7", ArrayTaskID="0")
    )
    assert (meta.array_job_id, meta.array_task_id, meta.array_tasks) == (7, None, "1-9%2")
    assert (task.array_job_id, task.array_task_id, task.array_tasks) == (7, 0, "")


def test_held_and_null_fields_in_text():
    [job] = squeue_text.jobs_from_squeue_text(
        record(PriorityLong="0", Reason="JobHeldUser", Account="(null)", QOS="(null)", Comment="(null)",
               MinMemory="0", StartTime="N/A", EndTime="NONE", TimeLimit="UNLIMITED", Feature="(null)")
    )
    assert job.hold and job.account == "" and job.qos == "" and job.comment == "" and job.memory_mb is None
    assert job.start_time is None and job.end_time is None and job.time_limit_min is None and job.features == ""


def test_record_cache_reuses_unchanged_jobs_and_never_outgrows_the_queue():
    cache: dict = {}
    first = squeue_text.jobs_from_squeue_text(record(JobID="1") + record(JobID="2"), cache)
    assert len(cache) == 2
    second = squeue_text.jobs_from_squeue_text(record(JobID="1") + record(JobID="3", Reason="Priority"), cache)
    assert second[0] is first[0]  # same record text: the very same (immutable) Job
    assert second[1].job_id == 3 and second[1].reason == "Priority"
    assert set(j.job_id for j in cache.values()) == {1, 3}  # job 2 left the queue and the cache
    changed = squeue_text.jobs_from_squeue_text(record(JobID="1", Reason="BeginTime"), cache)
    assert changed[0] is not first[0] and changed[0].reason == "BeginTime" and len(cache) == 1
    assert squeue_text.jobs_from_squeue_text("", cache) == [] and cache == {}
