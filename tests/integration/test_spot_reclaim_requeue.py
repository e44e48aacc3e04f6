"""A spot VM reclaimed under a running job, on any release (shell jobs only, so it runs on the chroot beds too):
the VM vanishes without notice, Slurm requeues the job, burstd closes the dead node's lease and the job bursts
again and completes on a cloud node; nothing is left behind.

Real parts: the live Slurm bed calling burstd's hooks, the burstd daemon process, SQLite, the local provider's
namespace VMs; the reclaim is the bed pulling the plug on the VM (``Bed.kill_vm``), as a cloud would.
"""

from __future__ import annotations

import pytest

from burstd.config import load_config
from tests.integration.daemon_bed import bed_daemon_config, cloud_namespaces, diagnosis, leases, running_daemon, wait_for

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def test_a_reclaimed_vm_requeues_its_job_which_bursts_again_and_completes(slurm_bed, bed_user, tmp_path):
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd")
    prefix = load_config(cfg_path).pools[0].node_prefix
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:
        # the first run waits to be reclaimed; the requeued one (SLURM_RESTART_COUNT=1) finishes
        script = ("#!/bin/sh\necho \"$(hostname) ${SLURM_RESTART_COUNT:-0}\"\n"
                  "[ \"${SLURM_RESTART_COUNT:-0}\" -ge 1 ] || sleep 600\n")
        job = slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "--requeue", "--open-mode=append", "-t", "15",
                                "-o", "out-%j.txt"], script, user=bed_user)
        diagnose = diagnosis(slurm_bed, [job], cfg_path, daemon)
        out = slurm_bed.workdir(bed_user) / f"out-{job}.txt"

        def first_run():
            info = slurm_bed.job(job)
            return (info.get("JobState") == "RUNNING" and out.exists() and out.read_text().strip()
                    and info.get("NodeList"))

        node = wait_for(first_run, 240, f"job {job} RUNNING on a cloud node", diagnose=diagnose)
        assert node.startswith(prefix), node
        assert slurm_bed.kill_vm(node)  # the spot market takes the VM back, no notice

        def finished():
            info = slurm_bed.job(job)
            assert info.get("JobState") not in ("FAILED", "CANCELLED", "TIMEOUT"), info
            return info.get("JobState") == "COMPLETED" and info

        info = wait_for(finished, 400, f"job {job} requeued and COMPLETED", diagnose=diagnose)
        assert int(info.get("Restarts", "0")) >= 1, info
        runs = [line.split() for line in out.read_text().splitlines() if line.strip()]
        assert [r[1] for r in runs] == ["0", "1"] and all(r[0].startswith(prefix) for r in runs), runs
        # the reclaimed node's lease is closed; after SuspendTime every lease is, and no VM is left
        wait_for(lambda: all(r["state"] in ("TERMINATED", "FAILED") for r in leases(cfg_path)), 240,
                 "every lease closed", diagnose=diagnose)
        wait_for(lambda: not cloud_namespaces(slurm_bed), 60, "no cloud namespace left", diagnose=diagnose)
        if slurm_bed.config.accounting:  # slurmdbd saw both runs of the job on cloud nodes
            sacct = slurm_bed.run(["sacct", "-n", "-P", "-D", "-j", str(job), "-X", "--format=NodeList,State"]).stdout
            assert any(line.startswith(prefix) for line in sacct.splitlines()), sacct
