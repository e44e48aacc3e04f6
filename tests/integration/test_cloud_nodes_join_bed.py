"""A cloud instance created through the real client (moto / fake GCE) becomes a Slurm node that runs jobs.

The fake clouds' instances never boot, so ``CloudBootStandIn`` starts a namespace slurmd for each live instance
(in place of the node bootstrap) and tears it down when the cloud says the instance is gone.
"""

from __future__ import annotations

import uuid

import pytest

from burstd.config import CloudConfig, PoolConfig
from burstd.providers.aws import AwsProvider
from burstd.providers.base import LaunchRequest
from burstd.providers.gcp import GcpProvider
from tests.fakes.cloud_boot import CloudBootStandIn
from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401

pytestmark = [pytest.mark.bed, pytest.mark.slow]
FAST = CloudConfig(api_attempts=3, retry_base_s=0.01, retry_max_s=0.05)


def _pool(bed, provider: str, section: dict) -> PoolConfig:
    return PoolConfig.model_validate({
        "name": provider, "provider": provider, "partition": bed.cloud_partition,
        "node_prefix": bed.config.cloud_prefix, "node_count": bed.config.cloud_count, "price_per_hour": 0.1,
        "instance_types": [{"name": "m5.large" if provider == "aws" else "n2-standard-2", "cpus": 2,
                            "memory_mb": 1000}],
        provider: section,
    })


def _power_down(bed, node: str) -> None:
    bed.run(["scontrol", "update", f"nodename={node}", "state=POWER_DOWN_FORCE", "reason=test cleanup"],
            check=False)
    bed.wait_for(lambda: "POWERED_DOWN" in bed.node(node).get("State", ""), 60, f"{node} powered down")


def test_aws_and_gcp_instances_join_as_their_nodes_run_jobs_and_leave(slurm_bed, aws_env, gce_env, tmp_path,
                                                                       bed_user):
    subnet = aws_env.client(direct=True).describe_subnets()["Subnets"][0]["SubnetId"]
    cluster = f"t{uuid.uuid4().hex[:6]}"
    aws = AwsProvider(_pool(slurm_bed, "aws", {"region": "us-east-1", "subnets": [subnet],
                                               "image_id": "ami-12c6146b", "endpoint_url": aws_env.url,
                                               "conf_server": slurm_bed.config.conf_server}),
                      cluster, FAST, session=aws_env.session())
    gcp = GcpProvider(_pool(slurm_bed, "gcp", {"project": gce_env.project, "region": "us-central1",
                                               "zones": ["us-central1-a"], "api_endpoint": gce_env.url,
                                               "anonymous_credentials": True,
                                               "conf_server": slurm_bed.config.conf_server}), cluster, FAST)
    a_node, g_node = slurm_bed.cloud_nodes[0], slurm_bed.cloud_nodes[1]
    # a node an earlier test left up (Slurm powers it down at SuspendTime, killing the VM booted here) or still
    # powering down (it ignores a registering slurmd): every cloud node plainly powered down first
    slurm_bed.reset_cloud_nodes()
    boot = CloudBootStandIn(slurm_bed, [aws, gcp], tmp_path / "vms")
    try:
        with boot:
            a = aws.launch(LaunchRequest(lease_id=f"{cluster}-a", node_name=a_node, pool="aws"))
            g = gcp.launch(LaunchRequest(lease_id=f"{cluster}-g", node_name=g_node, pool="gcp"))
            for node in (a_node, g_node):
                slurm_bed.wait_for(lambda n=node: "IDLE" in slurm_bed.node(n).get("State", "")
                                   and "POWER" not in slurm_bed.node(n).get("State", ""), 90, f"{node} to register")
            jobs = {n: slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-w", n, "-o", f"out-{n}.txt"],
                                        "#!/bin/sh\nhostname\n", user=bed_user) for n in (a_node, g_node)}
            for n, job in jobs.items():
                slurm_bed.wait_for(lambda j=job: slurm_bed.job(j).get("JobState") == "COMPLETED", 150,
                                   f"job {job} on {n}")
                assert slurm_bed.job(job)["NodeList"] == n
                out = slurm_bed.workdir(bed_user) / f"out-{n}.txt"
                assert out.read_text().strip() == n
            # Spot reclaim on AWS: the VM goes away with the instance.
            aws_env.faults.reclaim(a.instance_id)
            slurm_bed.wait_for(lambda: ("down", a_node, a.instance_id) in boot.history, 30, "reclaimed VM down")
            assert [i.preempted for i in aws.list_instances()] == [True]
            gcp.terminate([g.instance_id])
            slurm_bed.wait_for(lambda: ("down", g_node, g.instance_id) in boot.history, 30, "deleted VM down")
        assert boot.errors == [] and boot.booted == {}
        assert gce_env.fake.live(gce_env.project) == []
    finally:
        boot.close()
        for node in (a_node, g_node):
            _power_down(slurm_bed, node)
