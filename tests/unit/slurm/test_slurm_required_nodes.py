"""A job's ``sbatch -w`` node list reaches ``Job.required_nodes`` from every backend: squeue --json and scontrol
--json (every data parser), the squeue -O text path, slurmrestd's records, and pyslurm's Job objects.

The real captures hold no job that names its nodes (every record says ""), so they prove the unset case; the set
case is the same records with only ``required_nodes`` changed."""

from __future__ import annotations

import copy

import pytest

from burstd.slurm import parse, squeue_text
from burstd.slurm.pyslurm_backend import job_from_pyslurm
from tests.conftest import FIXTURES
from tests.unit.slurm.test_slurm_deadline import DATA_2205, JOB_DOCS, _doc
from tests.unit.slurm.test_slurm_pyslurm_recorded_shapes import recorded_job
from tests.unit.slurm.test_slurm_squeue_text import record

JOB_DOCS_2205 = sorted((DATA_2205 / "slurm-22.05").glob("*jobs.json"))
NONCE = "0123456789abcdef"


@pytest.mark.parametrize("path", JOB_DOCS + JOB_DOCS_2205, ids=lambda p: str(p.relative_to(DATA_2205)))
def test_every_capture_reads_its_required_nodes(path):
    doc = _doc(path)
    assert all(j.required_nodes == "" for j in parse.jobs_from_doc(doc))  # the captures name none
    doc = copy.deepcopy(doc)
    doc["jobs"][0]["required_nodes"] = "onprem[1-2]"
    first, *rest = parse.jobs_from_doc(doc)
    assert first.required_nodes == "onprem[1-2]" and all(j.required_nodes == "" for j in rest)


@pytest.mark.parametrize(("printed", "want"), [("onprem[1-2]", "onprem[1-2]"), ("", ""), ("(null)", "")])
def test_the_squeue_text_path_reads_the_required_nodes(printed, want):
    [job] = squeue_text.jobs_from_squeue_text(record(ReqNodes=printed), nonce=NONCE)
    assert job.required_nodes == want
    assert "ReqNodes:0" in squeue_text.squeue_text_format(NONCE)


def test_a_text_capture_from_before_the_reqnodes_field_still_reads():
    """A capture a burstd took before ReqNodes joined the fields: the record less its last field."""
    values = record(nonce=NONCE).split(squeue_text.FIELD_SEP)
    older = squeue_text.FIELD_SEP.join(values[:-2] + [values[-2] + values[-1][values[-1].index("\x1e"):]])
    [job] = squeue_text.jobs_from_squeue_text(older, nonce=NONCE)
    assert job.job_id == 42 and job.required_nodes == ""


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_pyslurm_jobs_carry_the_required_nodes(version):
    rec = _doc(FIXTURES / version / "squeue_t_all.json")["jobs"][0]
    assert job_from_pyslurm(recorded_job(rec)).required_nodes == ""
    rec = {**rec, "required_nodes": "onprem1"}
    job = job_from_pyslurm(recorded_job(rec))
    assert job.required_nodes == "onprem1" and job == parse.job_from_json(rec)
