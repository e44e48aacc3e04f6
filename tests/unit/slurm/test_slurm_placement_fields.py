"""Where a job may run, as it asked: ``sbatch -w`` and ``sbatch -x`` node lists and ``sbatch --reservation``
reach ``Job.required_nodes``, ``Job.excluded_nodes`` and ``Job.reservation`` from every backend: squeue --json and
scontrol --json (every data parser), the squeue -O text path, slurmrestd's records, and pyslurm's Job objects.

The real captures hold no job that names or excludes nodes or asks for a reservation (every record says ""), so
they prove the unset case; the set case is the same records with only that one field changed."""

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
#: Job's field (also pyslurm's attribute), its key in Slurm's JSON, and the squeue -O field that prints it
FIELDS = [("required_nodes", "required_nodes", "ReqNodes"), ("excluded_nodes", "excluded_nodes", "ExcNodes"),
          ("reservation", "resv_name", "Reservation")]


@pytest.mark.parametrize(("field", "key"), [(f, k) for f, k, _ in FIELDS])
@pytest.mark.parametrize("path", JOB_DOCS + JOB_DOCS_2205, ids=lambda p: str(p.relative_to(DATA_2205)))
def test_every_capture_reads_where_its_jobs_may_run(path, field, key):
    doc = _doc(path)
    assert all(getattr(j, field) == "" for j in parse.jobs_from_doc(doc))  # the captures name none
    doc = copy.deepcopy(doc)
    doc["jobs"][0][key] = "onprem[1-2]"
    first, *rest = parse.jobs_from_doc(doc)
    assert getattr(first, field) == "onprem[1-2]" and all(getattr(j, field) == "" for j in rest)
    assert all(getattr(first, other) == "" for other, _, _ in FIELDS if other != field)


@pytest.mark.parametrize(("field", "printed_as"), [(f, t) for f, _, t in FIELDS])
@pytest.mark.parametrize(("printed", "want"), [("onprem[1-2]", "onprem[1-2]"), ("", ""), ("(null)", "")])
def test_the_squeue_text_path_reads_where_its_jobs_may_run(field, printed_as, printed, want):
    [job] = squeue_text.jobs_from_squeue_text(record(**{printed_as: printed}), nonce=NONCE)
    assert getattr(job, field) == want
    assert f"{printed_as}:0" in squeue_text.squeue_text_format(NONCE)


@pytest.mark.parametrize("missing", [1, 2, 3], ids=["22.05, or before ExcNodes", "before Reservation",
                                                    "before ReqNodes"])
def test_a_record_without_the_last_fields_still_reads(missing):
    """A 22.05 record (no ExcNodes), or a capture a burstd took before Reservation or ReqNodes joined the
    fields: the record less its last fields."""
    values = record(ReqNodes="c1", Reservation="maint", nonce=NONCE).split(squeue_text.FIELD_SEP)
    older = squeue_text.FIELD_SEP.join(values[:-1 - missing] + [values[-1 - missing]
                                                                + values[-1][values[-1].index("\x1e"):]])
    [job] = squeue_text.jobs_from_squeue_text(older, nonce=NONCE)
    assert job.job_id == 42 and job.excluded_nodes == ""
    assert job.reservation == ("maint" if missing == 1 else "")
    assert job.required_nodes == ("c1" if missing <= 2 else "")


@pytest.mark.parametrize(("field", "key"), [(f, k) for f, k, _ in FIELDS])
@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_pyslurm_jobs_carry_where_they_may_run(version, field, key):
    rec = _doc(FIXTURES / version / "squeue_t_all.json")["jobs"][0]
    assert getattr(job_from_pyslurm(recorded_job(rec)), field) == ""
    rec = {**rec, key: "onprem1"}
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
