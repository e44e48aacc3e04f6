"""A node acts only on itself (issue 21 item 6), on the live bed: root with the munge key (on any cloud node, or
here on the head node: the same credential) writes a ``burstd-preempt:`` drain reason with a near deadline on a
cloud node that runs a job. Before the fix burstd drained that node's lease, and once the deadline passed failed
it, terminated its VM and requeued the job. Now the reason is a hint nothing confirms (the local provider lists the
VM running; the node's agent reported nothing): the lease stays READY, the VM and the job run on, and the daemon
says once that it did not act on the reason.

Real parts only: Slurm (the bed), the burstd daemon process, the local provider's network-namespace VMs.
"""

from __future__ import annotations

import time

import pytest

from burstd.domain.preemption import Notice, preemption_reason
from tests.integration.daemon_bed import (
    Gate, bed_daemon_config, cloud_namespaces, diagnosis, leases, running_daemon, wait_for,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def test_a_forged_preempt_reason_drains_and_terminates_nothing(slurm_bed, bed_user, tmp_path):
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd")
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:
        gate = Gate(slurm_bed, bed_user)
        job = slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-A", "funded", "-N", "1", "--exclusive", "-t", "10",
                                "-o", "out-%j.txt"], gate.script(), user=bed_user)
        diagnose = diagnosis(slurm_bed, [job], cfg_path, daemon)
        wait_for(lambda: slurm_bed.job(job).get("JobState") == "RUNNING", 180, "the job RUNNING on a cloud node",
                 diagnose=diagnose)
        node = slurm_bed.job(job)["NodeList"]

        def ready_lease():  # the job may run a cycle before the daemon records the node's lease READY
            mine = [r for r in leases(cfg_path, all_=False) if r["node_name"] == node]
            return mine[0] if len(mine) == 1 and mine[0]["state"] == "READY" else None
        lease = wait_for(ready_lease, 30, f"{node}'s lease READY", diagnose=diagnose)

        deadline = time.time() + 15
        forged = preemption_reason(Notice(kind="interruption", action="terminate", deadline=deadline, source="aws"))
        slurm_bed.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={forged}"])
        assert slurm_bed.node(node).get("Reason", "").startswith("burstd-preempt"), slurm_bed.node(node)

        # past the forged deadline and several cycles: nothing moved
        wait_for(lambda: time.time() > deadline + 12, 40, "the forged deadline to pass by a few cycles")
        (now,) = [r for r in leases(cfg_path) if r["lease_id"] == lease["lease_id"]]
        assert now["state"] == "READY", (now, daemon.log_tail())
        assert slurm_bed.job(job).get("JobState") == "RUNNING" and int(slurm_bed.job(job).get("Restarts", "0")) == 0
        assert f"{slurm_bed.netns_prefix}{node}" in cloud_namespaces(slurm_bed)  # the VM lives
        log = (tmp_path / "burstd.log").read_text()
        assert log.count("preemption reason not acted on") == 1, daemon.log_tail()

        slurm_bed.run(["scontrol", "update", f"nodename={node}", "state=resume"])
        gate.open()
        wait_for(lambda: slurm_bed.job(job).get("JobState") == "COMPLETED", 60, "the job to complete",
                 diagnose=diagnose)
