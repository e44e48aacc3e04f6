"""A job's ``sbatch --deadline`` reaches ``Job.deadline`` from every backend: squeue --json and scontrol --json
(every data parser), the squeue -O text path, slurmrestd, and pyslurm's Job objects (issue 25).

The real captures hold no job with a deadline (every record says 0: none), so they prove the unset case; the
set case is the same records with only ``deadline`` changed, in the shape each release prints."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import httpx
import pytest

from burstd.config import SlurmConfig
from burstd.slurm import parse, squeue_text
from burstd.slurm.pyslurm_backend import job_from_pyslurm
from burstd.slurm.replay import snapshot_from_files
from burstd.slurm.rest import RestAdapter
from tests.conftest import FIXTURES
from tests.unit.slurm.test_slurm_pyslurm_recorded_shapes import recorded_job
from tests.unit.slurm.test_slurm_rest_backend import Server
from tests.unit.slurm.test_slurm_squeue_text import record

DATA_2205 = Path(__file__).resolve().parents[2] / "data"
JOB_DOCS = sorted(p for p in FIXTURES.rglob("*.json") if p.name != "openapi_v3.json"
                  and "jobs" in json.loads(p.read_text()) and not p.name.endswith("_state.json"))
JOB_DOCS_2205 = sorted((DATA_2205 / "slurm-22.05").glob("*jobs.json")) + [DATA_2205 / "slurm-22.05/squeue.json"]
WHEN = 1_795_400_000  # 2026-11-22


def _doc(path: Path) -> dict:
    return parse.load_json(path.read_bytes(), str(path))


def _with_deadline(doc: dict, value) -> dict:
    doc = copy.deepcopy(doc)
    doc["jobs"][0]["deadline"] = value
    return doc


@pytest.mark.parametrize("path", JOB_DOCS + JOB_DOCS_2205, ids=lambda p: str(p.relative_to(DATA_2205)))
def test_the_real_captures_declare_no_deadline(path):
    doc = _doc(path)
    assert doc["jobs"] and all(j.get("deadline") in (0, {"set": True, "infinite": False, "number": 0})
                               for j in doc["jobs"])  # what Slurm prints for none
    assert all(j.deadline is None for j in parse.jobs_from_doc(doc))


@pytest.mark.parametrize("path", JOB_DOCS + JOB_DOCS_2205, ids=lambda p: str(p.relative_to(DATA_2205)))
def test_a_declared_deadline_reads_in_the_shape_of_each_release(path):
    doc = _doc(path)
    shaped = WHEN if isinstance(doc["jobs"][0]["deadline"], int) else {"set": True, "infinite": False, "number": WHEN}
    first, *rest = parse.jobs_from_doc(_with_deadline(doc, shaped))
    assert first.deadline == WHEN and all(j.deadline is None for j in rest)


@pytest.mark.parametrize("value", [{"set": False, "infinite": False, "number": WHEN},
                                   {"set": True, "infinite": True, "number": 0}, None, 0, 4294967294])
def test_an_unset_or_infinite_deadline_is_none(value):
    doc = _doc(FIXTURES / "26.05/squeue.json")
    assert parse.jobs_from_doc(_with_deadline(doc, value))[0].deadline is None


@pytest.mark.parametrize(("printed", "want"), [("1795400000", WHEN), ("N/A", None), ("0", None), ("NONE", None)])
def test_the_squeue_text_path_reads_the_deadline(printed, want):
    [job] = squeue_text.jobs_from_squeue_text(record(Deadline=printed), nonce="0123456789abcdef")
    assert job.deadline == want
    assert "Deadline" in squeue_text.SQUEUE_TEXT_FIELDS and "Deadline:0" in squeue_text.squeue_text_format()


def test_a_text_deadline_that_is_no_time_falls_back_to_json():
    with pytest.raises(squeue_text.TextParseError):
        squeue_text.jobs_from_squeue_text(record(Deadline="tomorrow"), nonce="0123456789abcdef")


def test_a_text_capture_from_before_the_deadline_field_still_replays(tmp_path):
    """The 22.05 bed captures (tests/data/slurm-22.05*) were taken with the field list before Deadline."""
    capture = DATA_2205 / "slurm-22.05" / "squeue_text.txt"
    jobs = squeue_text.jobs_from_squeue_text(capture.read_text())
    assert jobs and all(j.deadline is None for j in jobs)
    snap = snapshot_from_files([capture], active_only=False)
    assert {j.job_id for j in snap.jobs} == {j.job_id for j in jobs}
    # one field fewer again (five missing: ExcNodes, Reservation, ReqNodes, Deadline, Name) is no layout burstd
    # ever printed
    short = record(nonce="0123456789abcdef").split(squeue_text.FIELD_SEP)
    del short[-6:-1]
    with pytest.raises(squeue_text.TextParseError, match="fields"):
        squeue_text.jobs_from_squeue_text(squeue_text.FIELD_SEP.join(short), nonce="0123456789abcdef")


def test_slurmrestd_serves_the_deadline(tmp_path):
    jobs_file = tmp_path / "jobs.json"
    doc = _doc(FIXTURES / "26.05/rest/v0.0.45_jobs.json")
    pending = next(i for i, j in enumerate(doc["jobs"]) if j["job_state"] == ["PENDING"])
    doc["jobs"][pending]["deadline"] = {"set": True, "infinite": False, "number": WHEN}
    jobs_file.write_text(json.dumps(doc))
    token = tmp_path / "jwt"
    token.write_text("SLURM_JWT=tok-1\n")
    server = Server("v0.0.45")
    server.files = {**server.files, "jobs": jobs_file}
    config = SlurmConfig(backend="rest", rest_url="http://slurmrestd.test:6820", rest_token_file=str(token))
    rest = RestAdapter(config, client=httpx.Client(transport=httpx.MockTransport(server), base_url=config.rest_url))
    snap = rest.snapshot()
    declared = {j.job_id: j.deadline for j in snap.jobs if j.deadline is not None}
    assert declared == {doc["jobs"][pending]["job_id"]: WHEN}


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_pyslurm_jobs_carry_the_deadline(version):
    rec = _doc(FIXTURES / version / "squeue_t_all.json")["jobs"][0]
    assert job_from_pyslurm(recorded_job(rec)).deadline is None
    rec = {**rec, "deadline": {"set": True, "infinite": False, "number": WHEN}}
    job = job_from_pyslurm(recorded_job(rec))
    assert job.deadline == WHEN and job == parse.job_from_json(rec)
