"""The burst loop with a cloud pool when things go wrong: the daemon killed at a cloud call (and restarted), and
every offering out of capacity. The same parts as ``test_cloud_burst_loop.py`` (its docstring says which), whose
setup this file reuses; a file of its own, so pytest-xdist (a file to a worker) runs the two side by side.
"""

from __future__ import annotations

import pytest

from burstd.config import load_config
from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401
from tests.integration.daemon_bed import Gate, all_jobs, cloud_namespaces, diagnosis, leases, wait_for
from tests.integration.test_cloud_burst_loop import JOBS, cloud_config, daemon_with_cloud

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def created_per_lease(provider: str, aws_env, gce_env) -> dict[str, int]:
    counts: dict[str, int] = {}
    if provider == "aws":
        for r in aws_env.client(direct=True).describe_instances()["Reservations"]:
            for i in r["Instances"]:
                lease = {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get("burstd:lease", "")
                counts[lease] = counts.get(lease, 0) + 1
    else:
        for i in gce_env.fake.created:
            lease = i["labels"].get("burstd-lease", "")
            counts[lease] = counts.get(lease, 0) + 1
    return counts


# one provider a direction: the gang storms of test_crash_cloud.py kill the daemon at these points (and nine more)
# on both clouds; here the kill comes in the burst loop's own flow, the overflow of an on-prem queue
@pytest.mark.parametrize(("provider", "point"), [("aws", "terminate.before_provider"),
                                                 ("gcp", "launch.after_provider")])
def test_daemon_killed_at_a_cloud_call_restarts_without_duplicate_or_orphan(
        slurm_bed, bed_user, tmp_path, aws_env, gce_env, provider, point):
    from burstd.faults import CRASH_EXIT

    cfg_path = cloud_config(slurm_bed, tmp_path / "burstd", provider, aws_env, gce_env)
    with daemon_with_cloud(slurm_bed, cfg_path, tmp_path / "burstd.log", tmp_path / "vms") as (daemon, cloud, boot):
        daemon.stop()
        daemon.start(crash_at=point)
        # the jobs hold their nodes until the gate opens, so on-prem stays busy until the overflow has burst
        gate = Gate(slurm_bed, bed_user)
        jobs = [slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10",
                                  "-o", "out-%j.txt"], gate.script(), user=bed_user)
                for _ in range(JOBS)]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon, extra=lambda: f"boot history {boot.history}")
        all_running = all_jobs(slurm_bed, jobs, "RUNNING")
        if point.startswith("launch."):  # crashes on the way up: restart, then all four run at once
            assert daemon.wait_exit(240) == CRASH_EXIT, diagnose()
            daemon.start()  # restart, no crash point
            wait_for(all_running, 200, "every job RUNNING at once after the restart", diagnose=diagnose)
            gate.open()
        else:  # crashes on the way down: the jobs run, finish, the idle cloud nodes are suspended
            wait_for(all_running, 200, "every job RUNNING at once", diagnose=diagnose)
            gate.open()
            assert daemon.wait_exit(240) == CRASH_EXIT, diagnose()
            daemon.start()  # restart, no crash point

        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 300, "every job COMPLETED after the restart",
                 diagnose=diagnose)
        rows = wait_for(lambda: (r := leases(cfg_path)) and all(x["state"] == "TERMINATED" for x in r) and r,
                        180, "every lease TERMINATED", diagnose=diagnose)
        counts = created_per_lease(provider, aws_env, gce_env)
        assert counts and all(n == 1 for n in counts.values()), counts  # no duplicate VM for any lease
        assert set(counts) <= {r["lease_id"] for r in rows}
        wait_for(lambda: not [i for i in cloud.list_instances() if not i.is_gone], 60, "no instance left",
                 diagnose=diagnose)
        wait_for(lambda: not cloud_namespaces(slurm_bed), 30, "no cloud namespace left", diagnose=diagnose)


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_every_offering_exhausted_fails_the_lease_cleanly_with_the_reason_shown(
        slurm_bed, bed_user, tmp_path, aws_env, gce_env, provider):
    """No instance is made, the lease FAILS with the capacity reason (``burstctl events``, and its final reason),
    the jobs go back on-prem and complete there, and ``burstctl status --json`` says why the pool is not launching.
    """
    import json

    from typer.testing import CliRunner

    from burstd.cli.app import app

    cfg_path = cloud_config(slurm_bed, tmp_path / "burstd", provider, aws_env, gce_env)
    pool = load_config(cfg_path).pools[0]
    if provider == "aws":
        ec2 = aws_env.client(direct=True)
        for s in ec2.describe_subnets(SubnetIds=pool.aws.subnets)["Subnets"]:
            for t in pool.instance_types:
                aws_env.faults.exhaust(t.name, s["AvailabilityZone"])
    else:
        for z in pool.gcp.zones:
            for t in pool.instance_types:
                gce_env.fake.exhaust(t.name, z)
    with daemon_with_cloud(slurm_bed, cfg_path, tmp_path / "burstd.log", tmp_path / "vms") as (daemon, cloud, boot):
        # the jobs hold on-prem until the gate opens, so the overflow pends there while the launches fail
        gate = Gate(slurm_bed, bed_user)
        jobs = [slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10",
                                  "-o", "out-%j.txt"], gate.script(), user=bed_user)
                for _ in range(JOBS)]

        def squeue() -> str:
            sq = slurm_bed.run(["squeue", "-h", "-a", "-O", "JobID,State,Reason,Priority,Partition"], check=False)
            return "\n" + sq.stdout

        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon, extra=squeue)
        runner = CliRunner()

        def capacity_failures():
            result = runner.invoke(app, ["events", "--json", "--limit", "200", "--config", str(cfg_path)])
            assert result.exit_code == 0, result.output
            return [e for e in json.loads(result.output)
                    if e["to_state"] == "FAILED" and "capacity" in (e.get("reason") or "")]

        # What an admin sees (burstctl events): the lease failed, and why.
        failed = wait_for(capacity_failures, 120, "a lease FAILED for capacity in the event log",
                          diagnose=diagnose)
        assert any("InsufficientInstanceCapacity" in e["reason"] or "ZONE_RESOURCE_POOL_EXHAUSTED" in e["reason"]
                   or "cooling down" in e["reason"] for e in failed)
        # What `burstctl status` says: the pool's last launch failure, with the provider's reason.
        result = runner.invoke(app, ["status", "--json", "--config", str(cfg_path)])
        assert result.exit_code == 0, result.output
        health = json.loads(result.output)["pool_health"][pool.name]
        text = health["last_launch_failure"]["text"]
        assert text.startswith("last launch failure: ") and not health["launching"], health
        assert any(code in text for code in ("InsufficientInstanceCapacity", "ZONE_RESOURCE_POOL_EXHAUSTED",
                                             "cooling down", "capacity")), text
        plain = runner.invoke(app, ["status", "--config", str(cfg_path)])
        assert plain.exit_code == 0 and "last launch failure" in plain.output, plain.output

        # The jobs go back on-prem and complete there.
        gate.open()
        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 240, "every job COMPLETED on-prem", diagnose=diagnose)
        workdir = slurm_bed.workdir(bed_user)
        hosts = {j: (workdir / f"out-{j}.txt").read_text().split()[0] for j in jobs}
        assert set(hosts.values()) <= set(slurm_bed.onprem_nodes), hosts

        rows = wait_for(lambda: (r := leases(cfg_path)) and all(x["state"] in ("TERMINATED", "REFUSED") for x in r)
                        and r, 60, "the failed leases closed", diagnose=diagnose)
        assert rows and cloud.list_instances() == [] and boot.history == []
        # the capacity reason stays the failed lease's final reason
        closed = [r for r in rows if r["lease_id"] in {e["lease_id"] for e in failed}]
        assert closed and all("capacity" in (r.get("reason") or "") for r in closed), closed
    if provider == "aws":
        assert aws_env.client(direct=True).describe_instances()["Reservations"] == []
    else:
        assert gce_env.fake.created == []
