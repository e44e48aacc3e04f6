"""The burst loop end to end with a cloud pool: the burstd daemon process, an AWS pool against moto (real boto3
over HTTP, through the fault proxy) or a GCP pool against the fake Compute Engine endpoint (the real
google-cloud-compute client), the live Slurm bed calling burstd's hooks.

The fake clouds' instances never boot; ``CloudBootStandIn`` starts a namespace slurmd for each live instance in
place of the node bootstrap and tears it down when the instance is gone. A capacity error is injected on the
first offering, so the launches must land on the next one. The daemon killed at a cloud call, and every offering
exhausted, are in ``test_cloud_burst_faults.py`` (a file of its own, so pytest-xdist runs it beside this one).
"""

from __future__ import annotations

import base64
import contextlib
import tomllib
from pathlib import Path

import pytest

from burstd.config import load_config
from burstd.testbed.daemon_process import DaemonProcess
from burstd.providers import make_provider
from tests.fakes.cloud_boot import CloudBootStandIn
from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY, REGION, aws_env, moto_server  # noqa: F401
from tests.fakes.toml_out import dumps
from tests.integration.daemon_bed import (
    Gate,
    all_jobs,
    bed_daemon_config,
    cleanup_vms,
    cloud_namespaces,
    diagnosis,
    leases,
    wait_for,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]
JOBS = 4  # two on-prem nodes of 2 CPUs, whole-node jobs: two must burst


def cloud_config(bed, directory: Path, provider: str, aws_env, gce_env, policy: dict | None = None) -> Path:
    path = bed_daemon_config(bed, directory, cloud={"api_attempts": 3, "retry_base_s": 0.05, "retry_max_s": 0.2,
                                                    "capacity_cooldown_s": 600}, **({"policy": policy} if policy else {}))
    data = tomllib.loads(path.read_text())
    [local] = data["pools"]
    pool = {k: local[k] for k in ("partition", "node_prefix", "node_count", "features")}
    types = local["instance_types"]
    if provider == "aws":
        subnets = sorted(aws_env.client(direct=True).describe_subnets()["Subnets"],
                         key=lambda s: s["AvailabilityZone"])[:2]
        pool |= {"name": "aws", "provider": "aws", "price_per_hour": 0.1, "ondemand_price_per_hour": 0.3,
                 "instance_types": [dict(types[0], name="m5.large"), dict(types[0], name="c5.large")],
                 "aws": {"region": REGION, "subnets": [s["SubnetId"] for s in subnets], "image_id": "ami-12c6146b",
                         "endpoint_url": aws_env.url, "conf_server": bed.config.conf_server}}
    else:
        pool |= {"name": "gcp", "provider": "gcp", "price_per_hour": 0.1, "ondemand_price_per_hour": 0.3,
                 "instance_types": [dict(types[0], name="n2-standard-2"), dict(types[0], name="e2-standard-2")],
                 "gcp": {"project": gce_env.project, "region": "us-central1",
                         "zones": ["us-central1-a", "us-central1-b"], "api_endpoint": gce_env.url,
                         "anonymous_credentials": True, "conf_server": bed.config.conf_server}}
    data["pools"] = [pool]
    path.write_text(dumps(data))
    load_config(path)  # valid
    return path


@contextlib.contextmanager
def daemon_with_cloud(bed, config_path: Path, log_path: Path, boot_dir: Path):
    cfg = load_config(config_path)
    cloud = make_provider(cfg.pools[0], cfg)  # the test's own view of the fake cloud
    env = {"AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_KEY,
           "AWS_DEFAULT_REGION": REGION}
    daemon = DaemonProcess(config_path, log_path=log_path, env=env)
    boot = CloudBootStandIn(bed, [cloud], boot_dir)
    bed.reset_cloud_nodes()  # an earlier test may have left cloud nodes drained, down or powering down
    with bed.hooks("burstd"):
        daemon.start()
        boot.start()
        try:
            yield daemon, cloud, boot
        finally:
            daemon.stop()
            cleanup_vms(config_path)
            boot.close()
            cloud.close()


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_jobs_burst_onto_a_cloud_pool_land_past_a_capacity_error_run_and_everything_is_cleaned_up(
        slurm_bed, bed_user, tmp_path, aws_env, gce_env, provider):
    cfg_path = cloud_config(slurm_bed, tmp_path / "burstd", provider, aws_env, gce_env)
    # one launch at a time: the capacity cooldown an error sets is seen by the next launch, not by one already
    # under way beside it (with the launch pool two launches may both try the exhausted offering once)
    data = tomllib.loads(cfg_path.read_text())
    data["daemon"]["launch_workers"] = 1
    cfg_path.write_text(dumps(data))
    cfg = load_config(cfg_path)
    pool = cfg.pools[0]
    if provider == "aws":
        first_zone = aws_env.client(direct=True).describe_subnets(SubnetIds=[pool.aws.subnets[0]])["Subnets"][0][
            "AvailabilityZone"]
        aws_env.faults.exhaust("m5.large", first_zone)
    else:
        for z in pool.gcp.zones:
            gce_env.fake.exhaust("n2-standard-2", z)
    with daemon_with_cloud(slurm_bed, cfg_path, tmp_path / "burstd.log", tmp_path / "vms") as (daemon, cloud, boot):
        # every job holds its node until the gate opens: the four can only all run at once if two of them burst
        gate = Gate(slurm_bed, bed_user)
        jobs = [slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10",
                                  "-o", "out-%j.txt"], gate.script(), user=bed_user) for _ in range(JOBS)]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon, extra=lambda: f"boot history {boot.history}")

        wait_for(all_jobs(slurm_bed, jobs, "RUNNING"), 200, "every job RUNNING at once", diagnose=diagnose)
        gate.open()
        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 120, "every job COMPLETED", diagnose=diagnose)
        workdir = slurm_bed.workdir(bed_user)
        hosts = {j: (workdir / f"out-{j}.txt").read_text().split()[0] for j in jobs}
        on_cloud = sorted(h for h in hosts.values() if h in slurm_bed.cloud_nodes)
        assert len(on_cloud) >= JOBS - len(slurm_bed.onprem_nodes), hosts

        # The cloud saw the right requests, and none for the offering that had no capacity.
        rows = wait_for(lambda: (r := leases(cfg_path)) and all(x["state"] == "TERMINATED" for x in r) and r,
                        180, "every lease TERMINATED", diagnose=diagnose)
        lease_ids = {r["lease_id"] for r in rows}
        assert {r["node_name"] for r in rows} >= set(on_cloud)
        if provider == "aws":
            fleets = aws_env.faults.fleet_requests
            assert fleets and all(f["Type"] == "instant" and
                                  f["TargetCapacitySpecification.DefaultTargetCapacityType"] == "spot" for f in fleets)
            assert {f["ClientToken"].rsplit("-", 1)[0] for f in fleets} <= lease_ids
            tagged = {f[k.replace(".Key", ".Value")] for f in fleets for k, v in f.items()
                      if k.startswith("TagSpecification.") and k.endswith(".Key") and v == "burstd:lease"}
            assert tagged and tagged <= lease_ids
            instances = [i for r in aws_env.client(direct=True).describe_instances()["Reservations"]
                         for i in r["Instances"]]
            assert instances and all(i["State"]["Name"] == "terminated" for i in instances)
            assert not any(i["InstanceType"] == "m5.large" and i["Placement"]["AvailabilityZone"] == first_zone
                           for i in instances)
            user_data = [aws_env.client(direct=True).describe_instance_attribute(
                InstanceId=i["InstanceId"], Attribute="userData")["UserData"].get("Value", "") for i in instances]
            rendered = "\n".join(base64.b64decode(u).decode() for u in user_data if u)
        else:
            bodies = [b for kind, _, b in gce_env.fake.requests if kind == "bulkInsert"]
            assert bodies and all(b["instanceProperties"]["scheduling"]["provisioningModel"] == "SPOT" for b in bodies)
            assert {b["instanceProperties"]["labels"]["burstd-lease"] for b in bodies} <= lease_ids
            landed = [b["instanceProperties"]["machineType"] for b in bodies]
            assert "e2-standard-2" in landed and landed.count("n2-standard-2") <= 1  # cooled down after one error
            assert gce_env.fake.live(gce_env.project) == []
            rendered = "\n".join(i["value"] for b in bodies for i in b["instanceProperties"]["metadata"]["items"])
        assert ("up", on_cloud[0], next(iid for e, n, iid in boot.history if n == on_cloud[0])) in boot.history
        wait_for(lambda: not cloud_namespaces(slurm_bed), 30, "no cloud namespace left", diagnose=diagnose)
        assert boot.errors == []

    # No munge key (the bed's real one) and no credential in the daemon's log, the database or what the cloud got.
    key = Path("/etc/munge/munge.key").read_bytes()
    log_text = (tmp_path / "burstd.log").read_bytes()
    db = Path(cfg.database.url.removeprefix("sqlite:///")).read_bytes()
    for blob in (log_text, db, rendered.encode()):
        for secret in (key, base64.b64encode(key), FAKE_SECRET_KEY.encode(), FAKE_ACCESS_KEY.encode()):
            assert secret not in blob


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_a_job_the_policy_escalates_to_on_demand_launches_on_demand_in_a_spot_pool(
        slurm_bed, bed_user, tmp_path, aws_env, gce_env, provider):
    """Issue 10's daemon part: the market the policy decides reaches the cloud. ``max_preemptions_spot = 0`` (the
    policy's own escalation knob) sends every job of the spot pool on-demand; the lease records it and the cloud
    request asks for on-demand (EC2 Fleet ``DefaultTargetCapacityType``, GCE ``provisioningModel = STANDARD``)."""
    cfg_path = cloud_config(slurm_bed, tmp_path / "burstd", provider, aws_env, gce_env,
                            policy={"max_preemptions_spot": 0})
    pool = load_config(cfg_path).pools[0]
    assert pool.market == "spot" and pool.ondemand_price_per_hour == 0.3
    with daemon_with_cloud(slurm_bed, cfg_path, tmp_path / "burstd.log", tmp_path / "vms") as (daemon, cloud, boot):
        gate = Gate(slurm_bed, bed_user)
        jobs = [slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10",
                                  "-o", "out-%j.txt"], gate.script(), user=bed_user) for _ in range(JOBS)]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon, extra=lambda: f"boot history {boot.history}")
        wait_for(all_jobs(slurm_bed, jobs, "RUNNING"), 200, "every job RUNNING at once", diagnose=diagnose)
        live = [i for i in cloud.list_instances() if not i.is_gone]
        assert live and all(i.offering is not None and i.offering.market == "on-demand" for i in live), live
        gate.open()
        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 120, "every job COMPLETED", diagnose=diagnose)
        workdir = slurm_bed.workdir(bed_user)
        hosts = {j: (workdir / f"out-{j}.txt").read_text().split()[0] for j in jobs}
        on_cloud = sorted(h for h in hosts.values() if h in slurm_bed.cloud_nodes)
        assert len(on_cloud) >= JOBS - len(slurm_bed.onprem_nodes), hosts

        rows = wait_for(lambda: (r := leases(cfg_path)) and all(x["state"] == "TERMINATED" for x in r) and r,
                        180, "every lease TERMINATED", diagnose=diagnose)
        assert {r["node_name"] for r in rows} >= set(on_cloud)
        assert all(r["market"] == "on-demand" and r["price_per_hour_micro_usd"] == 300_000 for r in rows), rows
        if provider == "aws":
            fleets = aws_env.faults.fleet_requests
            assert fleets and all(f["TargetCapacitySpecification.DefaultTargetCapacityType"] == "on-demand"
                                  and not any(k.startswith("SpotOptions") for k in f) for f in fleets), fleets
            instances = [i for r in aws_env.client(direct=True).describe_instances()["Reservations"]
                         for i in r["Instances"]]
            assert instances and not any(i.get("InstanceLifecycle") == "spot" for i in instances)
        else:
            bodies = [b for kind, _, b in gce_env.fake.requests if kind == "bulkInsert"]
            assert bodies and all(b["instanceProperties"]["scheduling"]["provisioningModel"] == "STANDARD"
                                  for b in bodies), bodies
        wait_for(lambda: not cloud_namespaces(slurm_bed), 30, "no cloud namespace left", diagnose=diagnose)
        assert boot.errors == []
