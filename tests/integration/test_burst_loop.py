"""The burst loop end to end on the live bed: sbatch as a normal user -> pend on-prem -> burst -> run on cloud
nodes (the hostname proves it) -> complete -> cloud nodes power down -> every lease TERMINATED, no namespace left.

Real parts only: Slurm 22.05 (the bed) calling burstd's hooks, the burstd daemon process, SQLite, the local
provider's network-namespace VMs running a real slurmd.
"""

from __future__ import annotations

import pytest

from burstd.config import SlurmConfig, load_config
from burstd.slurm.cli import CliAdapter
from tests.integration.daemon_bed import (
    Gate, all_jobs, bed_daemon_config, cloud_namespaces, diagnosis, leases, running_daemon, wait_for,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]
JOBS = 6  # two on-prem nodes of 2 CPUs, each job asks for a whole node: four of them must burst


def test_sbatch_jobs_burst_run_on_cloud_complete_and_nodes_power_down(slurm_bed, bed_user, tmp_path):
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd")
    cfg = load_config(cfg_path)
    prefix = cfg.pools[0].node_prefix
    assert slurm_bed.onprem_partition in cfg.policy.onprem_partitions
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:
        # every job holds its node until the gate opens: the six can only all run at once if four of them burst
        gate = Gate(slurm_bed, bed_user)
        jobs = [slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10",
                                  "-o", "out-%j.txt"], gate.script(), user=bed_user) for _ in range(JOBS)]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon)
        # plain sbatch to the on-prem partition: the overflow pends there first (or, on a loaded machine where the
        # six submissions took longer than the policy's 3 s wait, already powers up a cloud node: CONFIGURING)
        first = {j: slurm_bed.job(j) for j in jobs}
        assert all(info.get("UserId", "").startswith(bed_user) for info in first.values())
        assert any(info.get("JobState") in ("PENDING", "CONFIGURING") for info in first.values()), first

        wait_for(all_jobs(slurm_bed, jobs, "RUNNING"), 200, "every job RUNNING at once", diagnose=diagnose)
        gate.open()
        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 120, "every job COMPLETED", diagnose=diagnose)
        workdir = slurm_bed.workdir(bed_user)
        hosts = {j: (workdir / f"out-{j}.txt").read_text().split()[0] for j in jobs}
        on_cloud = sorted(h for h in hosts.values() if h.startswith(prefix))
        on_prem = sorted(h for h in hosts.values() if not h.startswith(prefix))
        assert len(on_cloud) >= JOBS - len(slurm_bed.onprem_nodes), hosts
        assert set(on_prem) <= set(slurm_bed.onprem_nodes), hosts
        assert all(h in slurm_bed.cloud_nodes for h in on_cloud), hosts

        # after SuspendTime idle, Slurm calls SuspendProgram; burstd terminates the VMs and closes the leases
        def all_closed():
            rows = leases(cfg_path)
            return rows and all(r["state"] in ("TERMINATED",) for r in rows) and rows

        rows = wait_for(all_closed, 180, "every lease TERMINATED", diagnose=diagnose)
        assert {r["node_name"] for r in rows} >= set(on_cloud)
        wait_for(lambda: not cloud_namespaces(slurm_bed), 30, "no cloud namespace left", diagnose=diagnose)

        def powered_down():
            states = {n: slurm_bed.node(n).get("State", "") for n in slurm_bed.cloud_nodes}
            return all("POWERED_DOWN" in v and "POWERING" not in v for v in states.values()) and states

        wait_for(powered_down, 60, "every cloud node POWERED_DOWN in Slurm", diagnose=diagnose)
        # and the jobs that ran on the cloud are the ones recorded on the leases
        leased_jobs = {j for r in rows for j in r["job_ids"]}
        cloud_jobs = {j for j, h in hosts.items() if h.startswith(prefix)}
        assert cloud_jobs <= leased_jobs, (cloud_jobs, rows)

        # Slurm knows which instance backed each cloud node (23.11+ with slurmdbd): the daemon recorded it when the
        # node came up, so `sacctmgr show instance` lists every instance burstd launched, under its node's name
        slurm = CliAdapter(SlurmConfig(bin_dir=slurm_bed.bin_dir, conf=str(slurm_bed.conf_path)))
        if slurm.features.has("instance_fields"):
            assert slurm.accounting_enabled()  # every bed runs slurmdbd
            launched = {(r["node_name"], r["instance_id"]) for r in rows if r["instance_id"]}
            assert launched and {n for n, _ in launched} >= set(on_cloud), rows

            def instances():
                out = slurm_bed.run(["sacctmgr", "-n", "-P", "show", "instance",
                                     "format=nodename,instanceid,instancetype"], check=False).stdout
                listed = {tuple(line.split("|")[:2]) for line in out.splitlines() if line.count("|") == 2}
                return launched <= listed and listed

            wait_for(instances, 30, "sacctmgr show instance to list every instance burstd launched",
                     diagnose=diagnose)
