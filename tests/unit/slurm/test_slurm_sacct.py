"""sacct read so that no job's text can forge, hide or move another job (issue 21 item 5), and every run of a
requeued job read (issue 26): real 22.05 captures (tests/data/slurm-22.05-bed/sacct, from the bed), and a fake
``sacct`` that prints stored records exactly as sacct does for the arguments it is given (``--json``, ``-P``,
``--delimiter``, ``--format``, ``--duplicates``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burstd.slurm import sacct
from burstd.slurm.accounting import AccountingMixin
from burstd.slurm.base import SlurmError

BED = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05-bed" / "sacct"
CAPTURED_DELIMITER = "|3f9a0c1d2e4b5a6c|"  # the one the capture was taken with


def _key(rows):
    return sorted((r.job_id, r.start or 0, r.account, r.user, r.nodes, r.state, r.end) for r in rows)


def test_the_bed_captures_read_the_same_as_json_and_as_delimited_text():
    """22.05 on the bed: a requeued job (two runs), a requeued cloud job, an array (its tasks by their own ids,
    5_0 is job 7), a job named with a newline and bars, another account."""
    js = sacct.jobs_from_json(json.loads((BED / "sacct_json.json").read_text()))
    text = sacct.jobs_from_text((BED / "sacct_P_delimited.txt").read_text(), CAPTURED_DELIMITER)
    assert _key(js) == _key(text)
    assert sorted(r.job_id for r in js) == [1, 2, 2, 3, 4, 5, 6, 7]
    runs_of_2 = sorted((r.state, r.start) for r in js if r.job_id == 2)
    assert runs_of_2 == [("COMPLETED", 1795708256.0), ("REQUEUED", 1795708210.0)]
    cloud = [r for r in js if r.nodes == ("cloud1",)]
    assert [(r.job_id, r.state, r.account) for r in cloud] == [(4, "REQUEUED", "physics")]
    assert {r.account for r in js} == {"physics", "chemistry"}


def test_data_parser_shapes_of_2302_and_later_read_too():
    """23.02+ (data_parser v0.0.39..45): the state is a list, numbers may be {set, infinite, number} objects."""
    doc = {"jobs": [
        {"job_id": 21, "account": "physics", "user": "alice", "nodes": "c[1-2]",
         "state": {"current": ["COMPLETED"], "reason": "None"},
         "time": {"start": 1795301000, "end": {"set": True, "infinite": False, "number": 1795301060}}},
        {"job_id": 22, "account": "", "user": "bob", "nodes": "None assigned",
         "state": {"current": ["PENDING"], "reason": "Priority"}, "time": {"start": 0, "end": 0}},
    ]}
    rows = sacct.jobs_from_json(doc)
    assert [(r.job_id, r.nodes, r.state, r.start, r.end) for r in rows] == [
        (21, ("c1", "c2"), "COMPLETED", 1795301000.0, 1795301060.0), (22, (), "PENDING", None, None)]


# ---------------------------------------------------------------------------------- a sacct that prints as sacct
class Sacct(AccountingMixin):
    """``run`` prints the stored runs as sacct would for the arguments: ``--json`` as 22.05 does (or fails, as a
    Slurm without the JSON plugin), ``-P`` fields joined by ``--delimiter`` (``|`` by default) and raw, and
    without ``-D`` / ``--duplicates`` only the last run of each job."""

    _accounting = True

    def __init__(self, runs, json_works=True):
        self.runs, self.json_works, self.argvs = runs, json_works, []

    def run(self, cmd, args, env=None):
        assert cmd == "sacct"
        self.argvs.append(list(args))
        runs = self.runs
        if "-D" not in args and "--duplicates" not in args:
            last = {r["raw"]: r for r in runs}
            runs = [r for r in runs if last[r["raw"]] is r]
        if "--json" in args:
            if not self.json_works:
                raise SlurmError("sacct --json failed (exit 1): sacct: fatal: No serializer for mime type json")
            return json.dumps({"meta": {}, "errors": [], "jobs": [
                {"job_id": r["raw"], "account": r["account"], "user": r["user"], "nodes": r["nodes"],
                 "name": r.get("name", "x"), "state": {"current": r["state"], "reason": "None"},
                 "time": {"start": r["start"], "end": r["end"]}} for r in runs]})
        assert "-P" in args or "--parsable2" in args
        delimiter = next((a.split("=", 1)[1] for a in args if a.startswith("--delimiter=")), "|")
        fields = next(a.split("=", 1)[1] for a in args if a.startswith("--format=")).split(",")
        value = {"JobID": lambda r: r.get("shown", str(r["raw"])), "JobIDRaw": lambda r: str(r["raw"]),
                 "Account": lambda r: r["account"], "User": lambda r: r["user"],
                 "NodeList": lambda r: r["nodes"] or "None assigned", "State": lambda r: r["state"],
                 "Start": lambda r: str(r["start"] or "Unknown"), "End": lambda r: str(r["end"] or "Unknown")}
        return "".join(delimiter.join(value[f](r) for f in fields) + "\n" for r in runs)


def run_(raw, account="physics", nodes="onprem1", state="COMPLETED", start=100, end=200, **kw):
    return {"raw": raw, "account": account, "user": "alice", "nodes": nodes, "state": state, "start": start,
            "end": end, **kw}


# An account string (Slurm takes -A verbatim where associations are not enforced) that prints, under sacct -P,
# as the end of its own record, a whole forged record on a cloud node, and the start of a junk line.
FORGED = "physics\n999|physics|root|cloud1|COMPLETED|100|200\n7"
MOVING = "physics|root|cloud3|COMPLETED|100|200\n"  # with the rest of its line: job 8 "moved" to cloud3


@pytest.mark.parametrize("json_works", [True, False])
def test_an_account_string_cannot_invent_hide_or_move_a_job(json_works):
    runs = [run_(7), run_(8, account=FORGED, nodes="onprem2"), run_(9, account=MOVING, nodes="onprem1"),
            run_(10, nodes="cloud2")]
    adapter = Sacct(runs, json_works=json_works)
    got = {(r.job_id, r.account, r.nodes) for r in adapter.sacct_jobs(0.0)}
    assert got == {(7, "physics", ("onprem1",)), (8, FORGED, ("onprem2",)), (9, MOVING, ("onprem1",)),
                   (10, "physics", ("cloud2",))}
    text_calls = [a for a in adapter.argvs if "-P" in a]
    assert bool(text_calls) is not json_works  # the text path only where --json fails
    for argv in text_calls:  # a fresh delimiter per call, never the plain bar
        d = next(a.split("=", 1)[1] for a in argv if a.startswith("--delimiter="))
        assert len(d) >= 16 and d not in FORGED + MOVING


@pytest.mark.parametrize("json_works", [True, False])
def test_every_run_of_a_requeued_job_and_each_array_task_by_its_own_id(json_works):
    """Issue 26: without --duplicates sacct shows only a job's last run, and a preempted cloud run disappears;
    an array task is charged under its own job id (JobIDRaw 7), not the array's "5_0"."""
    runs = [run_(4, nodes="cloud1", state="REQUEUED"), run_(4, nodes="", state="PENDING", start=0, end=0),
            run_(7, shown="5_0"), run_(5, shown="5_1")]
    rows = Sacct(runs, json_works=json_works).sacct_jobs(0.0)
    assert sorted((r.job_id, r.nodes, r.state) for r in rows) == [
        (4, (), "PENDING"), (4, ("cloud1",), "REQUEUED"), (5, ("onprem1",), "COMPLETED"),
        (7, ("onprem1",), "COMPLETED")]


@pytest.mark.parametrize("out,why", [
    ("x|D|a|D|u|D|n1|D|COMPLETED|D|1|D|2\n", "job id"),
    ("0|D|a|D|u|D|n1|D|COMPLETED|D|1|D|2\n", "job id"),
    ("4294967296|D|a|D|u|D|n1|D|COMPLETED|D|1|D|2\n", "job id"),
    ("7|D|a|D|u|D|n[1-|D|COMPLETED|D|1|D|2\n", "node list"),
    ("7|D|a|D|u|D|n1;rm|D|COMPLETED|D|1|D|2\n", "node list"),
    ("7|D|a|D|u|D|n1|D|\x1b[31mOK|D|1|D|2\n", "state"),
    ("7|D|a|D|u|D|n1|D|COMPLETED|D|yesterday|D|2\n", "time"),
    ("7|D|a|D|u|D|n1|D|COMPLETED|D|1\n", "delimiters"),
    ("7|D|a|D|u|D|n1|D|COMPLETED|D|1|D|2\ntrailing junk\n", "after its last record"),
    ("7|D|a|D|u|D|n1|D|COMPLETED|D|1|D|2\n\n8|D|a|D|u|D|n1|D|COMPLETED|D|1|D|2\n", "end time and a job id"),
])
def test_a_row_that_does_not_read_is_an_error_naming_it_never_skipped(out, why):
    with pytest.raises(SlurmError, match=why):
        sacct.jobs_from_text(out, "|D|")


def test_json_records_of_the_wrong_shape_are_errors():
    for doc in ({"jobs": None}, {"jobs": [[]]}, {"jobs": [{"job_id": True}]},
                {"jobs": [{"job_id": 7, "nodes": "n1", "state": {"current": ["completed; rm"]}}]},
                {"jobs": [{"job_id": 7, "nodes": ["n1"], "state": {"current": ["COMPLETED"]}}]}):
        with pytest.raises(SlurmError):
            sacct.jobs_from_json(doc)


class NothingYet(Sacct):
    """slurmdbd with no matching job: 22.05's sacct --json answers with error 9003, "Nothing found" (seen on the
    bed when sacct ran before slurmdbd had recorded the job)."""

    def __init__(self, jobs_key: bool):
        super().__init__([])
        self.jobs_key = jobs_key

    def run(self, cmd, args, env=None):
        doc = {"meta": {}, "errors": [{"description": "Nothing found", "error_number": 9003,
                                       "error": "Nothing found with query", "source": "slurmdb_jobs_get"}]}
        return json.dumps(doc | ({"jobs": []} if self.jobs_key else {}))


@pytest.mark.parametrize("jobs_key", [True, False])
def test_nothing_found_is_an_empty_answer_not_an_error(jobs_key):
    assert NothingYet(jobs_key).sacct_jobs(0) == []


def test_any_other_error_in_the_json_still_fails_the_read():
    class Broken(Sacct):
        def run(self, cmd, args, env=None):
            return json.dumps({"errors": [{"description": "Unable to parse time", "error_number": 2}], "jobs": []})

    with pytest.raises(SlurmError, match="Unable to parse time"):
        Broken([]).sacct_jobs(0)


@pytest.mark.parametrize("current,word", [
    (["PENDING", "REQUEUED"], "REQUEUED"),  # 24.11 on the bed: a requeued run, as sacct -P says
    (["COMPLETED"], "COMPLETED"),
    (["RUNNING", "COMPLETING"], "COMPLETING"),
    (["FAILED", "REQUEUE_HOLD"], "REQUEUE_HOLD"),
    (["CANCELLED", "UNKNOWN_FLAG"], "CANCELLED"),
])
def test_json_state_lists_read_as_the_text_names_them(current, word):
    doc = {"jobs": [{"job_id": 5, "account": "a", "user": "u", "nodes": "onprem1",
                     "state": {"current": current, "reason": "None"}, "time": {"start": 100, "end": 200}}]}
    from burstd.slurm.sacct import jobs_from_json

    assert jobs_from_json(doc)[0].state == word


def test_an_array_task_keeps_its_array_and_task_as_slurm_writes_them():
    """Issue 26: ``explain 5_0`` of a finished task; 22.05's capture (5_0 ran as job 7, 5_1 as job 5) and 23.02+'s
    {set, number} task ids; a job that is no array task has none."""
    js = sacct.jobs_from_json(json.loads((BED / "sacct_json.json").read_text()))
    assert sorted((r.job_id, r.slurm_id) for r in js if r.array_job_id is not None) == [(5, "5_1"), (7, "5_0")]
    assert {r.slurm_id for r in js if r.job_id == 2} == {"2"}
    doc = {"jobs": [{"job_id": 31, "account": "a", "user": "u", "nodes": "c1", "state": {"current": ["FAILED"]},
                     "time": {"start": 1, "end": 2}, "array": {"job_id": 30, "task_id": {"set": True, "number": 1}}},
                    {"job_id": 32, "account": "a", "user": "u", "nodes": "c1", "state": {"current": ["FAILED"]},
                     "time": {"start": 1, "end": 2}, "array": {"job_id": 0, "task_id": {"set": False, "number": 0}}}]}
    assert [(r.job_id, r.slurm_id) for r in sacct.jobs_from_json(doc)] == [(31, "30_1"), (32, "32")]


@pytest.mark.parametrize("json_works", [True, False])
def test_sacct_is_asked_for_the_jobs_named_as_slurm_writes_them(json_works):
    from burstd.domain.jobref import parse_job_ref

    adapter = Sacct([run_(7, shown="5_0")], json_works=json_works)
    adapter.sacct_jobs(0.0, jobs=[parse_job_ref("5_0"), parse_job_ref("9")])
    assert all("--jobs=5_0,9" in argv and "-D" in argv for argv in adapter.argvs)
    adapter.sacct_jobs(0.0)
    assert not any(a.startswith("--jobs") for a in adapter.argvs[-1])
