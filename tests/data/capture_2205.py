#!/usr/bin/env python3
"""Capture Slurm 22.05 output from a live test bed into tests/data/slurm-22.05-bed/ (run as root, once).

    sudo BURSTD_BED_NAME=slurmcap BURSTD_BED_SLOT=42 python tests/data/capture_2205.py

Brings up its own bed with "bare" hooks (cloud nodes really boot as namespace VMs), submits a workload like
tests/data/slurm-fixtures/workload.sh, and saves, at two moments:
  snapshot1/  right after a cloud job was allocated (job CONFIGURING, node POWERING_UP)
  snapshot2/  once that node is up and the job RUNNING
each with squeue --json, sinfo --json, the cli backend's squeue -O text, scontrol show partitions -o,
and slurmrestd v0.0.36/37/38 jobs, nodes and partitions. Then takes the bed down.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from burstd.slurm import squeue_text  # noqa: E402
from burstd.testbed import Bed, BedConfig  # noqa: E402

OUT = Path(__file__).resolve().parent / "slurm-22.05-bed"
USER, OTHER = "burstuser", "burstuser2"


def save(bed: Bed, where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    env_run = lambda argv, **kw: bed.run(argv, **kw).stdout  # noqa: E731
    (where / "squeue.json").write_text(env_run(["squeue", "-a", "--json"]))
    (where / "sinfo.json").write_text(env_run(["sinfo", "--json"]))
    (where / "scontrol_show_partitions_o.txt").write_text(env_run(["scontrol", "show", "partitions", "-o"]))
    text = bed.run(["env", "SLURM_TIME_FORMAT=%s", "squeue", "-h", "-a", "-O", squeue_text.squeue_text_format()]).stdout
    (where / "squeue_text.txt").write_text(text)
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": bed.jwt()}
    for v in ("v0.0.36", "v0.0.37", "v0.0.38"):
        for e in ("jobs", "nodes", "partitions"):
            r = httpx.get(f"{bed.rest_url}/slurm/{v}/{e}", headers=headers, timeout=30)
            r.raise_for_status()
            (where / f"rest_{v}_{e}.json").write_text(json.dumps(r.json(), indent=1))


def main() -> int:
    bed = Bed(BedConfig.from_env(suspend_time=300, hooks="bare"))
    bed.up()
    try:
        onprem, cloud = bed.onprem_partition, bed.cloud_partition
        sleep = "#!/bin/sh\nsleep 900\n"
        sb = lambda opts, script=sleep, user=USER: bed.sbatch(["-o", "/dev/null", *opts], script, user=user)  # noqa
        long_run = sb(["-p", onprem, "-J", "long_run", "--comment=fixture long running", "--account=physics",
                       "--mem=300", "-t", "2:00:00"])
        requeue = sb(["-p", onprem, "-J", "sig_requeue", "--requeue", "-t", "30", "--mem=100"])
        sb(["-p", onprem, "-J", "arr_onprem", "--array=0-9", "-t", "10", "--mem=100"])
        sb(["-H", "-p", f"{onprem},{cloud}", "-J", "multi_part", "--constraint=cloud"], "#!/bin/sh\ntrue\n")
        sb(["-H", "-p", onprem, "-J", "held_user", "--comment=held by user"], "#!/bin/sh\ntrue\n")
        admin = sb(["-p", onprem, "-J", "held_admin", "--begin=now+1hour"], "#!/bin/sh\ntrue\n")
        bed.run(["scontrol", "hold", str(admin)])
        sb(["-p", onprem, "-J", "begin_later", "--begin=now+2hours"], "#!/bin/sh\ntrue\n")
        sb(["-p", onprem, "-J", "bob_dep", "--account=chemistry", f"--dependency=afterok:{long_run}", "--nice=100",
            "-n", "2", "--mem-per-cpu=100"], "#!/bin/sh\ntrue\n", user=OTHER)
        sb(["-p", onprem, "-J", "het_pair", "-H"], "#!/bin/sh\n#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n1\ntrue\n")
        sb(["-H", "-p", onprem, "-J", 'evil$(touch /tmp/pwned); echo "x"\n|',
            '--comment=$(touch /tmp/pwned); echo "x"|', "--account=acct$(id)"], "#!/bin/sh\ntrue\n")
        bed.run(["scontrol", "update", f"nodename={bed.cloud_nodes[-1]}", "state=DRAIN",
                 "reason=maintenance window"])
        bed.wait_for(lambda: bed.job(requeue).get("JobState") == "RUNNING", 60, "sig_requeue to run")
        bed.run(["scontrol", "requeue", str(requeue)])
        gpu = sb(["-p", cloud, "-J", "gpu_cloud", "-t", "60"])
        bed.wait_for(lambda: bed.job(gpu).get("JobState") == "CONFIGURING", 30, "the cloud job to configure")
        save(bed, OUT / "snapshot1")
        bed.wait_for(lambda: bed.job(gpu).get("JobState") == "RUNNING", 90, "the cloud job to run")
        save(bed, OUT / "snapshot2")
        (OUT / "squeue_version.txt").write_text(bed.run(["squeue", "--version"]).stdout)
        print(f"saved under {OUT}")
    finally:
        bed.run(["scancel", "-u", USER], check=False)
        bed.run(["scancel", "-u", OTHER], check=False)
        bed.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
