"""Issue 13 item 2 on the bed: a cloud node cut off from the head powers itself off when idle, never under a job.

The story: two jobs burst onto two namespace VMs (each job takes a whole node); one ends at once, the other is
held by a gate. The head is taken away (burstd SIGKILLed: the VMs' agents reach it over its control socket, a
pathname socket no firewall rule inside a namespace can cut). With ``agent.deadman_s`` short, the idle VM shuts
itself down (the local provider's power-off: everything in it ends, its record goes, so the spend stops) after
that time and not before; the VM running the job stays up well past it and the job keeps running. Once the gate
opens and the job completes, that VM powers off too. burstd, started again, finds both VMs gone, ends both
leases and leaves no VM behind; both jobs COMPLETED.
"""

from __future__ import annotations

import time

import pytest

from tests.bed import TEST_USER
from tests.integration.daemon_bed import (
    Gate,
    all_jobs,
    bed_daemon_config,
    diagnosis,
    job_states,
    leases,
    running_daemon,
    wait_for,
    world_readable_dir,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]

DEADMAN_S = 8.0  # agent.deadman_s for this test (900 by default)


def _vm_up(bed, node: str) -> bool:
    from burstd.providers.local import netns

    return netns.netns_exists(f"{bed.netns_prefix}{node}")


def _agent_log(cfg_path, bed, node: str) -> str:
    from burstd.config import load_config
    from burstd.providers.local.preemption import metadata_dir, records_dir_of

    cfg = load_config(cfg_path)
    pool = next(p for p in cfg.pools if p.provider == "local")
    return (metadata_dir(records_dir_of(cfg, pool), f"{bed.netns_prefix}{node}") / "agent.log").read_text()


def test_cut_off_node_powers_off_when_idle_and_only_after_its_job_when_busy(slurm_bed, tmp_path):
    from burstd.config import load_config
    from burstd.daemon.wiring import make_providers

    bed = slurm_bed
    d = world_readable_dir("burstd-deadman-")
    cfg = bed_daemon_config(bed, d, agent={"deadman_s": DEADMAN_S, "poll_interval_s": 0.5})
    gate = Gate(bed, TEST_USER)
    with running_daemon(bed, cfg, d / "burstd.log") as daemon:
        opts = ["-p", bed.cloud_partition, "--exclusive", "-o", "/dev/null", "-t", "10"]
        busy = bed.sbatch(opts, gate.script(), user=TEST_USER)
        quick = bed.sbatch(opts, "#!/bin/sh\nhostname\n", user=TEST_USER)
        diag = diagnosis(bed, [busy, quick], cfg, daemon)
        wait_for(lambda: job_states(bed, [busy, quick]) == {busy: "RUNNING", quick: "COMPLETED"}, 240,
                 "the gated job RUNNING and the quick one COMPLETED on cloud nodes", diagnose=diag)
        busy_node, quick_node = bed.job(busy)["NodeList"], bed.job(quick)["NodeList"]
        assert busy_node != quick_node and _vm_up(bed, busy_node) and _vm_up(bed, quick_node)
        wait_for(lambda: {x["node_name"]: x["state"] for x in leases(cfg, all_=False)}.get(quick_node) == "READY",
                 30, "the quick node's lease READY", diagnose=diag)

        daemon.kill()  # the head is gone: nobody is left to terminate the idle VM
        cut = time.monotonic()
        wait_for(lambda: not _vm_up(bed, quick_node), DEADMAN_S + 20, "the idle VM to power itself off",
                 interval=0.2, diagnose=diag)
        gone_after = time.monotonic() - cut
        assert gone_after >= DEADMAN_S - 1, f"powered off {gone_after:.1f}s after the cut, before deadman_s"
        assert "and no job on " + quick_node in _agent_log(cfg, bed, quick_node)

        time.sleep(max(0.0, 2 * DEADMAN_S + 2 - (time.monotonic() - cut)))  # well past deadman_s
        assert _vm_up(bed, busy_node) and job_states(bed, [busy]) == {busy: "RUNNING"}, diag()
        assert "a job runs on " + busy_node in _agent_log(cfg, bed, busy_node)

        gate.open()
        wait_for(all_jobs(bed, [busy], "COMPLETED"), 60, "the gated job to complete", diagnose=diag)
        wait_for(lambda: not _vm_up(bed, busy_node), 30, "the busy VM to power off once its job ended",
                 diagnose=diag)

        daemon.start()  # the head is back: the leases of both VMs end, nothing is left running
        wait_for(lambda: not leases(cfg, all_=False), 60, "both leases to end", diagnose=diag)
        ended = {x["node_name"]: x for x in leases(cfg) if x["node_name"] in (busy_node, quick_node)}
        assert {n: x["state"] for n, x in ended.items()} == {busy_node: "TERMINATED", quick_node: "TERMINATED"}, ended
        assert all("vanished" in x["reason"] for x in ended.values()), ended  # the VM went; burstd saw it gone
        live = [i for p in make_providers(load_config(cfg)).values() for i in p.list_instances() if not i.is_gone]
        assert live == [], live
        assert job_states(bed, [busy, quick]) == {busy: "COMPLETED", quick: "COMPLETED"}
    gate.remove()


def test_a_vm_whose_lease_burstd_does_not_know_powers_off_at_once(slurm_bed):
    """The other rule: a burstd answers and has no open lease for this node, so nothing will ever terminate the
    VM (a launch burstd never recorded): its agent powers it off at its first look, long before ``deadman_s``
    and before burstd's own orphan sweep (``orphan_grace_s``) would."""
    import uuid

    from burstd.config import load_config
    from burstd.daemon.wiring import make_providers
    from burstd.providers.base import LaunchRequest

    bed = slurm_bed
    d = world_readable_dir("burstd-deadman-")
    cfg = bed_daemon_config(bed, d, agent={"deadman_s": 600, "poll_interval_s": 0.5}, daemon={"orphan_grace_s": 600})
    with running_daemon(bed, cfg, d / "burstd.log") as daemon:
        provider = make_providers(load_config(cfg))["local"]
        node = bed.cloud_nodes[-1]
        inst = provider.launch(LaunchRequest(lease_id=uuid.uuid4().hex, node_name=node, pool="local"))
        assert _vm_up(bed, node)
        start = time.monotonic()
        wait_for(lambda: not _vm_up(bed, node), 30, "the VM without a lease to power itself off",
                 diagnose=lambda: daemon.log_tail(20))
        assert time.monotonic() - start < 30
        assert "burstd has no open lease for " + node in _agent_log(cfg, bed, node)
        assert all(i.instance_id != inst.instance_id for i in provider.list_instances())
