"""The daemon SIGKILLed around the requeue of a reclaimed node's job: the job comes back exactly once. A file of
its own (the crash storms: test_crash.py) so pytest-xdist (a file to a worker) runs it beside them."""

from __future__ import annotations

import pytest

from tests.integration.crash_storm import REQUEUE_CHAINS, storm  # noqa: F401 (storm: the fixture)

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def test_sigkill_around_the_requeue_of_a_reclaimed_node_brings_its_job_back_exactly_once(storm, slurm_bed, bed_user):
    """A job runs on a cloud node; the node's VM is powered off without notice; the daemon is killed with the
    lease FAILED and the requeue owed (then, next chain, with the requeue made and its record not yet forgotten).
    After the restart the job is back exactly once: Slurm counts one restart, and it runs again."""
    node = storm.nodes[0]
    for chain in REQUEUE_CHAINS:
        storm.daemon.stop()
        storm.daemon.start()
        job = slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-w", node, "-n", "1", "-t", "10", "--requeue",
                                "-o", "out-%j.txt"], "#!/bin/sh\nhostname\nsleep 600\n", user=bed_user)
        storm.wait(lambda job=job: slurm_bed.job(job).get("JobState") == "RUNNING", f"job {job} running on {node}",
                   timeout=120)
        storm.run_chain(chain, lambda: slurm_bed.kill_vm(node), step_timeout=60)

        def back_once(job=job):
            info = slurm_bed.job(job)
            return info.get("Restarts") == "1" and info.get("JobState") in ("PENDING", "CONFIGURING", "RUNNING")
        storm.wait(back_once, f"job {job} requeued once ({chain[0]})", timeout=120)
        storm.wait(lambda job=job: slurm_bed.job(job).get("JobState") == "RUNNING", f"job {job} running again",
                   timeout=180)
        assert slurm_bed.job(job).get("Restarts") == "1", slurm_bed.job(job)
        with storm.store() as store:
            assert store.intents() == [], "a requeue still owed after the job came back"
        slurm_bed.run(["scancel", str(job)])
        storm.scontrol_nodes("POWER_DOWN_ASAP")
        storm.wait(storm.settled_down, "every node down, every lease closed, no VM", timeout=120)
        storm.check_invariants()
    summary = storm.summary("requeue", 0)
    print(f"\n{summary}\nphases (s): {storm.phases}")
    storm.assert_every_point_fired(REQUEUE_CHAINS, summary)
