"""A multi-node job on a cloud pool: Slurm resumes its nodes together (its resume file maps the job to them),
the daemon records them as one gang and gets every node from one all-or-nothing cloud call (EC2 Fleet with
``MinTargetCapacity``, GCE bulkInsert with ``minCount``), the job runs across them, and everything is cleaned up.

Real parts: the live Slurm bed calling burstd's hooks, the burstd daemon process, SQLite, boto3 against moto
(through the fault proxy) or google-cloud-compute against the fake Compute Engine endpoint; the fake clouds'
instances are booted by ``CloudBootStandIn`` (a namespace slurmd per live instance, named by its tags).
"""

from __future__ import annotations

import pytest

from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401
from tests.integration.daemon_bed import cloud_namespaces, leases, wait_for
from tests.integration.test_cloud_burst_loop import cloud_config, daemon_with_cloud

pytestmark = [pytest.mark.bed, pytest.mark.slow]
NODES = 2


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_a_multi_node_job_gets_every_cloud_node_from_one_all_or_nothing_launch(
        slurm_bed, bed_user, tmp_path, aws_env, gce_env, provider):
    cfg_path = cloud_config(slurm_bed, tmp_path / "burstd", provider, aws_env, gce_env)
    with daemon_with_cloud(slurm_bed, cfg_path, tmp_path / "burstd.log", tmp_path / "vms") as (daemon, cloud, boot):
        script = "#!/bin/sh\nsrun hostname\n"  # one task on each node: the job really spans both
        job = slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-N", str(NODES), "--ntasks-per-node", "1",
                                "-t", "5", "-o", "out-%j.txt"], script, user=bed_user)

        def done():
            info = slurm_bed.job(job)
            assert info.get("JobState") not in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), \
                (info, leases(cfg_path), daemon.log_tail())
            return info.get("JobState") == "COMPLETED" and info

        wait_for(done, 300, f"job {job} COMPLETED")
        hosts = (slurm_bed.workdir(bed_user) / f"out-{job}.txt").read_text().split()
        assert len(hosts) == NODES and len(set(hosts)) == NODES and set(hosts) <= set(slurm_bed.cloud_nodes), hosts

        rows = wait_for(lambda: (r := leases(cfg_path)) and all(x["state"] == "TERMINATED" for x in r) and r,
                        180, "every lease TERMINATED")
        ran = [r for r in rows if r["node_name"] in hosts]
        assert len(ran) == NODES and all(job in r["job_ids"] for r in ran), rows
        gangs = {r["gang"] for r in ran}
        assert len(gangs) == 1 and gangs <= {r["lease_id"] for r in ran}, ran  # the leader's lease id

        if provider == "aws":
            fleets = aws_env.faults.fleet_requests
            assert len(fleets) == 1, fleets  # one call for the whole job
            [fleet] = fleets
            assert fleet["TargetCapacitySpecification.TotalTargetCapacity"] == str(NODES)
            assert fleet["SpotOptions.MinTargetCapacity"] == str(NODES)
            assert fleet["SpotOptions.SingleAvailabilityZone"] == "true"
            instances = [i for r in aws_env.client(direct=True).describe_instances()["Reservations"]
                         for i in r["Instances"]]
            tagged = {t["Value"] for i in instances for t in i["Tags"] if t["Key"] == "burstd:node"}
            assert tagged == set(hosts) and all(i["State"]["Name"] == "terminated" for i in instances)
        else:
            bodies = [b for kind, _, b in gce_env.fake.requests if kind == "bulkInsert"]
            assert len(bodies) == 1, bodies
            assert int(bodies[0]["count"]) == int(bodies[0]["minCount"]) == NODES
            assert len(gce_env.fake.created) == NODES and gce_env.fake.live(gce_env.project) == []
        assert {n for e, n, _ in boot.history if e == "up"} == set(hosts)
        wait_for(lambda: not cloud_namespaces(slurm_bed), 30, "no cloud namespace left")
        assert boot.errors == []
