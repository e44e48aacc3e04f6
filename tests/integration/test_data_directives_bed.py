"""Issue 24 item 1 on a live Slurm bed: a job's data directives, submitted with plain sbatch, read back through
Slurm (``scontrol write batch_script``) by the cli adapter and turned into the DataView decide() weighs.

Run alone on a bed of your own:  BURSTD_BED_NAME=datadec BURSTD_BED_SLOT=40 pytest tests/integration/test_data_directives_bed.py
"""

from __future__ import annotations

import pytest

from burstd.config import SlurmConfig
from burstd.daemon.data_needs import REFUSED, JobDataNeeds
from burstd.domain.data import DataItem
from burstd.slurm import make_adapter
from burstd.slurm.base import SlurmError

pytestmark = pytest.mark.bed

HEX = "5e" * 32
SCRIPT = f"""#!/bin/sh
#SBATCH -t 10
#BURSTD stage-in /proj/imagenet size=180GB sha256={HEX}
#BURSTD stage-out "/proj/runs/exp 42"
#DW stage_in source=/proj/vocab.txt destination=$DW_JOB_STRIPED/vocab.txt type=file
true
"""


def test_directives_are_read_back_through_slurm_and_bad_ones_keep_the_job_home(slurm_bed, bed_user):
    cli = make_adapter(SlurmConfig(backend="cli", conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir))
    jobs = [slurm_bed.sbatch(["-H", "-o", "/dev/null", "-p", slurm_bed.onprem_partition], script, user=bed_user)
            for script in (SCRIPT, "#!/bin/sh\n#BURSTD stage-in ../etc\ntrue\n", "#!/bin/sh\ntrue\n")]
    try:
        good, bad, plain = jobs
        assert cli.batch_script(good) == SCRIPT  # Slurm keeps the script byte for byte
        needs = JobDataNeeds(cli.batch_script)
        view = needs.view(cli.snapshot())
        assert view is not None
        assert view.needs[good].inputs == (DataItem("/proj/imagenet", 180 * 10**9, "sha256:" + HEX),
                                           DataItem("/proj/vocab.txt"))
        assert view.needs[good].outputs == (DataItem("/proj/runs/exp 42"),)
        assert view.needs[bad] is REFUSED and "line 2" in needs.errors[bad]
        assert not view.needs[plain].declared
        with pytest.raises(SlurmError):
            cli.batch_script(99_999_999)  # no such job: Slurm says so
    finally:
        slurm_bed.run(["scancel", *map(str, jobs)], check=False)
