"""The squeue text path against forged records: researcher-controlled text never forges, hides or alters
another job's record (issue 9, item 1). The live check, through real sbatch, is in
tests/integration/test_slurm_adapter.py::test_job_names_with_separators_never_forge_records_on_the_bed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.slurm import squeue_text
from burstd.slurm.squeue_text import FIELD_SEP as US, RECORD_END as RS
from tests.hypothesis_profiles import examples

NONCE = "0123456789abcdef"
FREE_TEXT = ("Name", "Comment", "Account", "Feature", "QOS", "Reason")


def record(nonce: str = NONCE, **over: str) -> str:
    base = dict(
        JobID="42", ArrayJobID="42", ArrayTaskID="N/A", HetJobID="N/A", HetJobOffset="N/A", UserName="alice",
        Account="physics", Partition="onprem", QOS="normal", PriorityLong="1000", SubmitTime="1795301514",
        EligibleTime="1795301514", StartTime="N/A", EndTime="N/A", TimeLimit="1:00:00", NodeList="",
        NumNodes="1", NumCPUs="4", MinMemory="1G", **{"tres-alloc": "cpu=4,mem=1G,node=1"},
        **{"tres-per-node": "N/A", "tres-per-job": "N/A"}, Feature="x86", State="PENDING", Reason="Resources",
        RestartCnt="0", Comment="hello", Name="train", Deadline="N/A", ReqNodes="",
        Reservation="(null)", ExcNodes="",
    )
    base.update(over)
    return US.join(base[f] for f in squeue_text.SQUEUE_TEXT_FIELDS) + RS + nonce + "\n"


def forged(job_id: str, **over: str) -> str:
    """A complete record as an attacker would write it: right separators, but no way to know the nonce."""
    return record("", JobID=job_id, ArrayJobID=job_id, Account="excluded", PriorityLong="999999", **over)


def test_a_name_carrying_a_whole_forged_record_stays_one_name():
    evil = "x" + RS + "\n" + forged("7").rstrip("\n")
    out = record(JobID="7", Account="excluded", Comment="burst:no") + record(JobID="8", Name=evil.replace(US, ""))
    jobs = squeue_text.jobs_from_squeue_text(out, nonce=NONCE)
    assert [j.job_id for j in jobs] == [7, 8]
    assert jobs[0].comment == "burst:no" and jobs[1].name == evil.replace(US, "")


def test_a_forged_record_with_unit_separators_falls_back_instead_of_parsing():
    evil = "x" + RS + "\n" + forged("7").rstrip("\n")  # keeps its US: the record has too many fields
    with pytest.raises(squeue_text.TextParseError, match="fields"):
        squeue_text.jobs_from_squeue_text(record(JobID="8", Name=evil), nonce=NONCE)


def test_a_record_terminator_without_the_nonce_does_not_end_a_record():
    out = record(JobID="8", Comment="a" + RS + "\n" + "b")
    [job] = squeue_text.jobs_from_squeue_text(out, nonce=NONCE)
    assert job.comment == "a" + RS + "\nb"


def test_one_job_id_printed_twice_is_refused():
    with pytest.raises(squeue_text.TextParseError, match="twice"):
        squeue_text.jobs_from_squeue_text(record(JobID="5") + record(JobID="5"), nonce=NONCE)


@pytest.mark.parametrize("job_id", ["-5", "0", "1" + "0" * 24, "٣", "4294967296"])
def test_job_ids_outside_slurms_range_are_refused(job_id):
    with pytest.raises(squeue_text.TextParseError):
        squeue_text.jobs_from_squeue_text(record(JobID=job_id), nonce=NONCE)


def test_the_nonce_cannot_carry_a_comma_or_separator():
    with pytest.raises(ValueError):
        squeue_text.squeue_text_format("ab,Comment:0")
    assert squeue_text.new_nonce() != squeue_text.new_nonce() and squeue_text.new_nonce().isalnum()


# Any text Slurm accepts in a C string (everything but NUL), separators and newlines weighted in, and the
# undecodable bytes that reach us as surrogate escapes.
_hostile_char = st.one_of(
    st.sampled_from([US, RS, "\n", "\r", RS + "\n", "(null)", "N/A", ",", "|", NONCE]),
    st.characters(blacklist_characters="\x00", blacklist_categories=()),
)
hostile_text = st.lists(_hostile_char, max_size=12).map("".join)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({f: hostile_text for f in FREE_TEXT}), min_size=1, max_size=5), st.data())
def test_any_free_text_round_trips_or_falls_back_and_never_changes_another_record(texts, data):
    nonce = squeue_text.new_nonce()  # what the attacker cannot know
    out = "".join(record(nonce, JobID=str(100 + i), **t) for i, t in enumerate(texts))
    try:
        jobs = squeue_text.jobs_from_squeue_text(out, nonce=nonce)
    except squeue_text.TextParseError:
        # the only way to fail: some free text held the unit separator (JSON is read instead)
        assert any(US in v for t in texts for v in t.values())
        return
    assert not any(US in v for t in texts for v in t.values())
    assert [j.job_id for j in jobs] == [100 + i for i in range(len(texts))]
    for job, t in zip(jobs, texts):
        assert job.name == t["Name"] and job.reason == (t["Reason"] or "None")
        assert job.comment == ("" if t["Comment"] in ("(null)", "N/A") else t["Comment"])
        assert job.account == ("" if t["Account"] in ("(null)", "N/A") else t["Account"])
        assert (job.user, job.priority, job.partitions) == ("alice", 1000, ("onprem",))
