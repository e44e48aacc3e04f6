"""Issue 24 item 4 end to end on the live bed: the burstd daemon reads each pending job's data directives through
Slurm, a job that declares ``#BURSTD data-never-leaves`` stays on-prem however long its wait while a job without
it bursts, and ``burstctl explain`` says why the first stays.

Real parts only: Slurm (the bed) calling burstd's hooks, the burstd daemon process, SQLite, the local
provider's network-namespace VMs running a real slurmd.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from burstd.config import load_config
from tests.integration.daemon_bed import (
    Gate,
    all_jobs,
    bed_daemon_config,
    diagnosis,
    fill_onprem,
    leases,
    running_daemon,
    wait_for,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def explain(cfg_path, job: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "burstd.cli.app", "explain", str(job), "--json", "--config",
                           str(cfg_path)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def test_a_never_leave_job_stays_home_while_an_undeclared_one_bursts(slurm_bed, bed_user, tmp_path):
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd")
    prefix = load_config(cfg_path).pools[0].node_prefix
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:
        gate = Gate(slurm_bed, bed_user)
        opts = ["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10", "-o", "out-%j.txt"]
        fill = fill_onprem(slurm_bed, gate.script(), bed_user, ["-t", "10", "-o", "out-%j.txt"])
        secret = gate.script().replace("#!/bin/sh\n", "#!/bin/sh\n#BURSTD data-never-leaves\n", 1)
        home = slurm_bed.sbatch(opts, secret, user=bed_user)
        # held to an on-prem node by `sbatch -w`: a VM bought for it would sit idle
        pinned_to = slurm_bed.onprem_nodes[0]
        pinned = slurm_bed.sbatch([*opts, "-w", pinned_to], gate.script(), user=bed_user)
        free = slurm_bed.sbatch(opts, gate.script(), user=bed_user)
        jobs = [*fill, home, pinned, free]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon)
        wait_for(all_jobs(slurm_bed, [free], "RUNNING"), 200, "the undeclared job RUNNING on the cloud",
                 diagnose=diagnose)
        info = slurm_bed.job(home)
        assert info.get("JobState") == "PENDING", info
        assert slurm_bed.cloud_partition not in info.get("Partition", "").split(","), info
        why_home = explain(cfg_path, home)
        assert why_home["burst"] is False, why_home
        assert "its data never leaves the site (the job declares #BURSTD data-never-leaves)" in why_home["reason"]
        # (the undeclared job's burst sentence, with its "declared no data" note, is tested in the unit cycle test:
        # here it is already running, and explain tells a running job's state instead)
        info = slurm_bed.job(pinned)
        assert info.get("JobState") == "PENDING", info
        assert slurm_bed.cloud_partition not in info.get("Partition", "").split(","), info
        why_pinned = explain(cfg_path, pinned)
        assert why_pinned["burst"] is False, why_pinned
        assert f"asks for nodes {pinned_to} (sbatch -w); {pinned_to} not in pool" in why_pinned["reason"], why_pinned
        # one VM, for the undeclared job: none for the never-leave job, none for the pinned one
        assert len(leases(cfg_path)) == 1, leases(cfg_path)

        gate.open()  # the on-prem nodes free up: the never-leave job runs there
        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 200, "every job COMPLETED", diagnose=diagnose)
        workdir = slurm_bed.workdir(bed_user)
        hosts = {j: (workdir / f"out-{j}.txt").read_text().split()[0] for j in jobs}
        assert hosts[free].startswith(prefix) and hosts[free] in slurm_bed.cloud_nodes, hosts
        assert hosts[home] in slurm_bed.onprem_nodes and hosts[pinned] == pinned_to, hosts
