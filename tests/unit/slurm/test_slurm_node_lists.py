"""A job's ``sbatch -w`` and ``sbatch -x`` node lists reach ``Job.required_nodes`` and ``Job.excluded_nodes`` from
every backend: squeue --json and scontrol --json (every data parser), the squeue -O text path, slurmrestd's
records, and pyslurm's Job objects.

The real captures hold no job that names or excludes nodes (every record says ""), so they prove the unset case;
the set case is the same records with only that one field changed."""

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
#: Job's field (also the key in Slurm's JSON) and the squeue -O field that prints it
LISTS = [("required_nodes", "ReqNodes"), ("excluded_nodes", "ExcNodes")]


@pytest.mark.parametrize("field", [f for f, _ in LISTS])
@pytest.mark.parametrize("path", JOB_DOCS + JOB_DOCS_2205, ids=lambda p: str(p.relative_to(DATA_2205)))
def test_every_capture_reads_its_node_lists(path, field):
    doc = _doc(path)
    assert all(getattr(j, field) == "" for j in parse.jobs_from_doc(doc))  # the captures name none
    doc = copy.deepcopy(doc)
    doc["jobs"][0][field] = "onprem[1-2]"
    first, *rest = parse.jobs_from_doc(doc)
    assert getattr(first, field) == "onprem[1-2]" and all(getattr(j, field) == "" for j in rest)
    other = next(f for f, _ in LISTS if f != field)
    assert getattr(first, other) == ""


@pytest.mark.parametrize(("field", "printed_as"), LISTS)
@pytest.mark.parametrize(("printed", "want"), [("onprem[1-2]", "onprem[1-2]"), ("", ""), ("(null)", "")])
def test_the_squeue_text_path_reads_the_node_lists(field, printed_as, printed, want):
    [job] = squeue_text.jobs_from_squeue_text(record(**{printed_as: printed}), nonce=NONCE)
    assert getattr(job, field) == want
    assert f"{printed_as}:0" in squeue_text.squeue_text_format(NONCE)


@pytest.mark.parametrize("missing", [1, 2], ids=["before ExcNodes", "before ReqNodes"])
def test_a_text_capture_from_before_the_node_list_fields_still_reads(missing):
    """A capture a burstd took before ExcNodes (or ReqNodes too) joined the fields: the record less its last."""
    values = record(ReqNodes="c1", nonce=NONCE).split(squeue_text.FIELD_SEP)
    older = squeue_text.FIELD_SEP.join(values[:-1 - missing] + [values[-1 - missing]
                                                                + values[-1][values[-1].index("\x1e"):]])
    [job] = squeue_text.jobs_from_squeue_text(older, nonce=NONCE)
    assert job.job_id == 42 and job.excluded_nodes == ""
    assert job.required_nodes == ("c1" if missing == 1 else "")


@pytest.mark.parametrize("field", [f for f, _ in LISTS])
@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_pyslurm_jobs_carry_the_node_lists(version, field):
    rec = _doc(FIXTURES / version / "squeue_t_all.json")["jobs"][0]
    assert getattr(job_from_pyslurm(recorded_job(rec)), field) == ""
    rec = {**rec, field: "onprem1"}
    job = job_from_pyslurm(recorded_job(rec))
    assert getattr(job, field) == "onprem1" and job == parse.job_from_json(rec)


@pytest.mark.parametrize(("printed", "want"), [
    ("12|c[1-2]\n13|\n14|(null)\n15|onprem3\n", {12: "c[1-2]", 15: "onprem3"}),
    ("", {}),
])
def test_the_exclusions_beside_a_2205_text_snapshot_read(printed, want):
    assert squeue_text.exclusions_from_text(printed) == want


@pytest.mark.parametrize("printed", ["c[1-2]\n", "x|c1\n", "0|c1\n", f"{2**32}|c1\n"])
def test_exclusions_that_are_not_squeues_ask_for_json(printed):
    with pytest.raises(squeue_text.TextParseError):
        squeue_text.exclusions_from_text(printed)
