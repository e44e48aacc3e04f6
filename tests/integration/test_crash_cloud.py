"""Invariant 6 under fire on the clouds: SIGKILL the daemon inside the cloud calls of gang launch and terminate
storms (AWS against moto, GCP against the fake Compute Engine endpoint), restart it, and check that there is exactly
one VM per live lease, no orphan, no duplicate, no VM the records miss, and that every gang job still completes.

The same story as ``test_crash.py`` (its docstring says how kill points are driven) on the cloud providers, whose
instances ``CloudBootStandIn`` boots: two 2-node jobs a storm, so two gangs (one all-or-nothing create call each).
A file of its own so pytest-xdist (a file to a worker) runs it beside the local storm.
"""

from __future__ import annotations

import random
import tomllib

import pytest

from burstd.config import load_config
from tests.fakes.gce import gce_env, gce_server  # noqa: F401
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401
from tests.fakes.toml_out import dumps
from tests.integration.crash_storm import CLOUD_CHAINS, CRASH_CLOUD, CRASH_DAEMON, Storm
from tests.integration.test_cloud_burst_loop import cloud_config, daemon_with_cloud

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def made_by_the_cloud(provider: str, aws_env, gce_env):
    """Every VM id the fake cloud ever made, terminated ones included."""
    if provider == "aws":
        return lambda: [i["InstanceId"] for r in aws_env.client(direct=True).describe_instances()["Reservations"]
                        for i in r["Instances"]]
    return lambda: [f"{i['zone'].rsplit('/', 1)[-1]}/{i['name']}" for i in gce_env.fake.created]


@pytest.mark.parametrize("provider", ["aws", "gcp"])
def test_sigkill_inside_cloud_calls_of_gang_storms_leaves_one_vm_per_lease_and_none_unrecorded(
        slurm_bed, bed_user, tmp_path, aws_env, gce_env, provider):
    random.seed(13)
    chains = CLOUD_CHAINS[provider]
    cfg_path = cloud_config(slurm_bed, tmp_path / "burstd", provider, aws_env, gce_env)
    data = tomllib.loads(cfg_path.read_text())
    data["daemon"] |= CRASH_DAEMON | {"orphan_grace_s": 4}  # planted orphans go soon
    data["cloud"] |= CRASH_CLOUD
    cfg_path.write_text(dumps(data))
    cfg = load_config(cfg_path)
    with daemon_with_cloud(slurm_bed, cfg_path, tmp_path / "burstd.log", tmp_path / "vms") as (daemon, cloud, boot):
        storm = Storm(slurm_bed, daemon, cloud, boot=boot, made_ids=made_by_the_cloud(provider, aws_env, gce_env),
                      store_url=cfg.database.url)
        held: list[int] = []
        gang = len(storm.nodes) // 2  # two jobs of two nodes each: two gangs, one create call each

        def submit(script: str) -> list[int]:
            return [slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-N", str(gang), "--ntasks-per-node", "2",
                                      "-t", "10", "-o", "out-%j.txt"], script, user=bed_user) for _ in range(2)]

        def launch_storm() -> None:
            held[:] = submit("#!/bin/sh\nhostname\nsleep 600\n")

        def terminate_storm() -> None:
            slurm_bed.run(["scancel", *map(str, held)])
            storm.scontrol_nodes("POWER_DOWN_ASAP")
            storm.plant_orphan()

        storm.run_chain(chains["launch"], launch_storm)
        storm.wait(storm.settled_up, "every node up with one READY lease and one VM", timeout=240)
        storm.check_invariants()
        storm.run_chain(chains["terminate"], terminate_storm)
        storm.wait(storm.settled_down, "every node down, every lease closed, no VM", timeout=120)
        storm.check_invariants()

        # the last storm's gang jobs are short and span their nodes; the daemon is SIGKILLed at a random instant
        # of their launch (inside the cloud calls, as likely as not): each job must complete
        jobs: list[int] = []
        storm.random_kill(lambda: jobs.extend(submit("#!/bin/sh\nsrun hostname\n")), lo=0.3, hi=2.5)

        def jobs_done():
            states = {j: slurm_bed.job(j).get("JobState") for j in jobs}
            bad = {j: s for j, s in states.items() if s in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")}
            assert not bad, f"jobs ended badly: {bad}"
            return all(s == "COMPLETED" for s in states.values()) and states

        storm.wait(jobs_done, "every gang job of the crashed storm COMPLETED", timeout=240)
        storm.check_invariants()
        for j in jobs:
            hosts = (slurm_bed.workdir(bed_user) / f"out-{j}.txt").read_text().split()
            assert len(set(hosts)) == gang and set(hosts) <= set(storm.nodes), hosts
        # idle now: Slurm suspends the nodes after SuspendTime; crash inside those terminate calls too
        storm.run_chain(chains["idle"], lambda: None, step_timeout=60)
        storm.wait(storm.settled_down, "every node down after the jobs", timeout=120)
        storm.check_invariants()

        summary = storm.summary(provider, len(jobs))
        print(f"\n{summary}\nphases (s): {storm.phases}")
        storm.assert_every_point_fired(list(chains.values()), summary)
        assert storm.planted and not storm.alive(), summary
