"""Job ids as Slurm writes them (issue 26): ``int("1234_5")`` is 12345 in Python, so no typed id may go
through ``int()``; ``parse_job_ref`` reads every form and ``JobRef.find`` picks the snapshot's records."""

from __future__ import annotations

import pytest

from burstd.domain.jobref import JobRef, JobRefError, parse_job_ref, task_ids
from burstd.domain.slurm import Job


@pytest.mark.parametrize("text, ref", [
    ("1234", JobRef(1234)),
    (" 1234 ", JobRef(1234)),
    ("1234_5", JobRef(1234, task=5)),
    ("1234_[1-3]", JobRef(1234, tasks="1-3")),
    ("1234_[1,4,7-9:2%2]", JobRef(1234, tasks="1,4,7-9:2%2")),
    ("1234+0", JobRef(1234, het_offset=0)),
    ("1234.batch", JobRef(1234)),  # pasted from sacct: the job of the step
    ("1234_5.0", JobRef(1234, task=5)),
])
def test_every_form_slurm_writes_is_read(text, ref):
    got = parse_job_ref(text)
    assert got == ref
    assert str(got) == text.strip().split(".")[0]


@pytest.mark.parametrize("text", ["", "abc", "1234_", "12_34_5", "-5", "0", "1__0", "1234+", "12 34",
                                  "1234_[3-1]", "1234_[a]", str(2**32), "1234;rm -rf /"])
def test_anything_else_is_refused_naming_it(text):
    with pytest.raises(JobRefError, match="job id|array tasks"):
        parse_job_ref(text)


def test_the_underscore_is_not_a_digit_separator():
    assert parse_job_ref("1234_5").job_id == 1234 != int("1234_5")


def test_task_expressions():
    assert task_ids("1-3") == {1, 2, 3}
    assert task_ids("0-15:4%2") == {0, 4, 8, 12}
    assert task_ids("1,3,5-6") == {1, 3, 5, 6}


def _job(job_id, state="PENDING", **kw):
    return Job(job_id, "j", "u", "a", ("batch",), state, **kw)


ARRAY_RUNNING = _job(1240, "RUNNING", array_job_id=1234, array_task_id=1)
ARRAY_PENDING = _job(1234, array_job_id=1234, array_tasks="2-9")
HET = (_job(1300, het_job_id=1300, het_job_offset=0), _job(1301, het_job_id=1300, het_job_offset=1))
PLAIN = _job(12345)
JOBS = (PLAIN, ARRAY_RUNNING, ARRAY_PENDING, *HET)


def test_find_picks_the_record_slurm_means():
    assert parse_job_ref("1234_1").find(JOBS) == [ARRAY_RUNNING]
    assert parse_job_ref("1234_5").find(JOBS) == [ARRAY_PENDING]  # not started: still in the array's record
    assert parse_job_ref("1234_10").find(JOBS) == []
    assert parse_job_ref("1234_[1-3]").find(JOBS) == [ARRAY_PENDING, ARRAY_RUNNING]
    assert parse_job_ref("1234").find(JOBS) == [ARRAY_PENDING, ARRAY_RUNNING]
    assert parse_job_ref("12345").find(JOBS) == [PLAIN]
    assert parse_job_ref("1300+1").find(JOBS) == [HET[1]]
    assert parse_job_ref("1301").find(JOBS) == [HET[1]]
    assert parse_job_ref("1300").find(JOBS) == [HET[0], HET[1]]
