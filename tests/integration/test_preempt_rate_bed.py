"""Issue 22 item 3 on real Slurm: the TaskProlog puts the pool's preemption rate (the file the agent keeps) into
the task's environment, and a job's own value wins. A bed of its own (slot + 71), its slurm.conf naming the
TaskProlog; the agent -> daemon half is checked over the daemon's real TLS API in tests/unit/daemon/test_api_auth.py.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path

import pytest

import burstd
from tests.bed import TEST_USER, bed_skip_reason, worker_bed_identity

pytestmark = [pytest.mark.bed]


@pytest.fixture
def prolog_bed():
    reason = bed_skip_reason()
    if reason:
        pytest.skip(reason)
    from burstd.testbed import Bed, BedConfig

    folder = Path(tempfile.mkdtemp(prefix="burstd-taskprolog-"))
    folder.chmod(0o755)  # slurmd runs the TaskProlog as the job user: it must reach the script and the file
    repo = Path(burstd.__file__).resolve().parent.parent
    prolog = folder / "task-prolog"
    base = BedConfig.from_env()
    mine = worker_bed_identity()  # the worker's own slot: another worker may bring up its side bed meanwhile
    bed = Bed(BedConfig.from_env(name=f"{mine.name[:7]}-tp", slot=mine.slot + 71, onprem_count=1, cloud_count=1,
                                 extra_conf=(f"TaskProlog={prolog}",)))
    if base.slurm_release:
        pytest.skip("a release bed's slurmd runs in a chroot that holds neither this project nor its Python: "
                    "the host's Slurm only")
    bed.up(install=False)
    try:
        python = bed.job_env().python  # one the job user may run (the project's venv may be private to root)
        prolog.write_text("#!/bin/sh\nexec env PYTHONPATH=" + shlex.quote(str(repo)) + " " + shlex.quote(str(python))
                          + " -m burstd.agent.preempt_rate --file " + shlex.quote(str(folder / "preempt-rate"))
                          + "\n")
        prolog.chmod(0o755)
        yield bed, folder
    finally:
        bed.down()
        shutil.rmtree(folder, ignore_errors=True)


def _job_output(bed, script: str) -> str:
    job = bed.sbatch(["-p", bed.onprem_partition, "-o", "tp-%j.out"], script, user=TEST_USER)
    state = bed.wait_for(lambda: (s := bed.job(job).get("JobState")) in ("COMPLETED", "FAILED", "CANCELLED") and s,
                         120, f"job {job} to end")
    path = bed.workdir(TEST_USER) / f"tp-{job}.out"
    text = path.read_text()
    path.unlink()
    assert state == "COMPLETED", text
    return text


def test_the_task_prolog_exports_the_agents_rate_and_never_overrides_the_jobs_own(prolog_bed):
    bed, folder = prolog_bed
    show = "#!/bin/sh\nsrun sh -c 'echo rate=${BURSTD_PREEMPT_RATE_PER_HOUR:-unset}'\n"
    assert _job_output(bed, show).strip() == "rate=unset"  # no file yet: the job keeps its default
    rate = folder / "preempt-rate"
    from burstd.agent.preempt_rate import write_rate_file

    write_rate_file(str(rate), 0.25)
    assert _job_output(bed, show).strip() == "rate=0.25"
    own = "#!/bin/sh\nexport BURSTD_PREEMPT_RATE_PER_HOUR=3\nsrun sh -c 'echo rate=$BURSTD_PREEMPT_RATE_PER_HOUR'\n"
    assert _job_output(bed, own).strip() == "rate=3"
    rate.write_text("1; touch /tmp/pwned-by-rate\n")  # whatever lands in the file, no shell runs it
    assert _job_output(bed, show).strip() == "rate=unset" and not Path("/tmp/pwned-by-rate").exists()
