"""Invariant 6 under fire: SIGKILL the daemon at many points of launch and terminate storms, restart it, and check
that there is exactly one VM per live lease, no orphan, no duplicate, and that every job still completes.

Real parts: the bed's Slurm calling burstd's hooks, the daemon process, SQLite, the local provider's namespace VMs.
Kill points are driven two ways:

* deterministic: ``BURSTD_CRASH_AT=<point>:<n>`` makes the daemon ``os._exit`` at a named point (before/after
  the provider call, after the durable intent, after the snapshot, during terminate...); a *chain* of points is
  run per storm, restarting the daemon after each crash;
* random: SIGKILL at a random instant while launches or terminations are in flight (inside provider calls).

Each launch storm is four jobs submitted with sbatch to the cloud partition (Slurm powers four nodes up and calls
ResumeProgram); the jobs hold the nodes until the terminate storm cancels them and powers the nodes down. The
last round's jobs are short and must complete.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from burstd.config import load_config
from burstd.daemon.faults import CRASH_EXIT
from burstd.daemon.runner import DaemonProcess
from burstd.domain.lease import FINAL_STATES, LeaseState
from tests.integration.daemon_bed import bed_daemon_config, cleanup_vms, cloud_namespaces, wait_for

pytestmark = [pytest.mark.bed, pytest.mark.slow]
S = LeaseState

LAUNCH_CHAINS = [
    ["resume.after_commit:1", "launch.before_provider:1", "launch.after_provider:1", "cycle.after_snapshot:1",
     "launch.after_booting:1", "launch.before_launching:1", "ready.before:1"],
    ["launch.before_launching:2", "launch.after_provider:2", "launch.before_provider:1", "ready.before:2",
     "launch.after_booting:2", "cycle.after_snapshot:2"],
    ["launch.after_provider:1", "launch.after_provider:1", "launch.after_booting:1", "launch.before_provider:1",
     "ready.before:1", "cycle.after_snapshot:3"],
    ["resume.after_commit:1", "launch.before_provider:2", "launch.after_booting:1", "launch.after_provider:1",
     "launch.before_launching:1", "ready.before:1"],
    ["resume.after_commit:1", "launch.after_booting:3", "launch.before_provider:1", "launch.after_provider:1",
     "ready.before:1"],
]
TERMINATE_CHAINS = [
    ["terminate.before_provider:1", "terminate.after_provider:1", "terminate.before_provider:2",
     "cycle.after_snapshot:2"],
    ["terminate.after_provider:2", "terminate.before_provider:1", "cycle.after_snapshot:2",
     "terminate.after_provider:1"],
    ["terminate.before_provider:3", "terminate.after_provider:1", "terminate.after_provider:1",
     "terminate.before_provider:1"],
    ["terminate.after_provider:1", "terminate.before_provider:1", "terminate.before_provider:1",
     "terminate.after_provider:1"],
    ["terminate.after_provider:1", "terminate.before_provider:1", "terminate.before_provider:1",
     "terminate.after_provider:2"],
]


class Storm:
    """The bed, one daemon, and the bookkeeping of kills."""

    def __init__(self, bed, cfg_path, log_path):
        from burstd.db.store import Store
        from burstd.daemon.wiring import make_providers

        self.bed = bed
        self.cfg_path = cfg_path
        self.cfg = load_config(cfg_path)
        self.daemon = DaemonProcess(cfg_path, log_path=log_path)
        self.provider = make_providers(self.cfg)[self.cfg.pools[0].name]
        self.store_url = self.cfg.database.url
        self._store_cls = Store
        self.crashes: Counter[str] = Counter()  # point -> deterministic crashes that happened there
        self.random_kills = 0
        self.unreached: list[str] = []
        self.nodes = list(bed.cloud_nodes)

    def store(self):
        return self._store_cls.open(self.store_url)

    def scontrol_nodes(self, state: str) -> None:
        self.bed.run(["scontrol", "update", f"nodename={','.join(self.nodes)}", f"state={state}"])

    def run_chain(self, chain: list[str], trigger) -> None:
        """Start with the first crash point, fire the trigger, then restart at each next point after a crash."""
        self.daemon.stop()
        self.daemon.start(crash_at=chain[0])
        trigger()
        for i, spec in enumerate(chain):
            rc = self.daemon.wait_exit(8)
            if rc is None:  # the point was not reached (the work it guards was already done): kill anyway
                self.daemon.kill()
                self.unreached.append(spec)
                self.random_kills += 1
            else:
                assert rc == CRASH_EXIT, f"daemon exited {rc} instead of crashing at {spec}:\n{self.daemon.log_tail()}"
                self.crashes[spec.split(":")[0]] += 1
            if i + 1 < len(chain):
                self.daemon.start(crash_at=chain[i + 1])
        self.daemon.start()  # clean

    def random_kill(self, trigger, lo: float = 0.05, hi: float = 1.2) -> None:
        self.daemon.stop()
        self.daemon.start()
        trigger()
        time.sleep(random.uniform(lo, hi))
        self.daemon.kill()
        self.random_kills += 1
        self.daemon.start()

    # --- what must hold -------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        with self.store() as store:
            leases = store.leases()
        by_id = {x.lease_id: x for x in leases}
        alive = [i for i in self.provider.list_instances() if not i.is_gone]
        per_lease = Counter(i.lease_id for i in alive)
        assert all(n == 1 for n in per_lease.values()), f"duplicate VMs for a lease: {per_lease}"
        per_node = Counter(i.node_name for i in alive)
        assert all(n == 1 for n in per_node.values()), f"two VMs for one node: {per_node}"
        for inst in alive:
            lease = by_id.get(inst.lease_id)
            assert lease is not None, f"orphan VM {inst.instance_id} (lease {inst.lease_id!r} unknown)"
            assert lease.state not in FINAL_STATES, f"orphan VM {inst.instance_id}: its lease is {lease.state}"
        for lease in leases:
            if lease.state in (S.BOOTING, S.READY, S.DRAINING):
                assert per_lease.get(lease.lease_id) == 1, f"lease {lease.lease_id} {lease.state} has no VM"
        open_by_node = Counter(x.node_name for x in leases if x.state not in FINAL_STATES)
        assert all(n == 1 for n in open_by_node.values()), f"two open leases for a node: {open_by_node}"
        netns_of_vms = {i.extra.get("netns") for i in alive}
        assert cloud_namespaces(self.bed) == netns_of_vms, (cloud_namespaces(self.bed), netns_of_vms)

    def settled_up(self):
        with self.store() as store:
            open_ = [x for x in store.leases() if x.state not in FINAL_STATES]
        alive = [i for i in self.provider.list_instances() if not i.is_gone]
        up = all("POWER" not in self.bed.node(n).get("State", "") for n in self.nodes)
        return (len(open_) == len(self.nodes) and all(x.state == S.READY for x in open_)
                and len(alive) == len(self.nodes) and up)

    def settled_down(self):
        with self.store() as store:
            open_ = [x for x in store.leases() if x.state not in FINAL_STATES]
        alive = [i for i in self.provider.list_instances() if not i.is_gone]
        return not open_ and not alive and self.nodes_clean_down()

    def nodes_clean_down(self) -> bool:
        """Every cloud node plainly powered down: not DOWN, not on its way anywhere."""
        return all(set(self.bed.node(n).get("State", "").split("+")) - {"NOT_RESPONDING"}
                   == {"IDLE", "CLOUD", "POWERED_DOWN"} for n in self.nodes)

    def reset_nodes(self) -> None:
        """Leave (or start from) a clean slate: a node left DOWN or half powered by an earlier run is forced down."""
        if not self.nodes_clean_down():
            self.bed.run(["scontrol", "update", f"nodename={','.join(self.nodes)}", "state=POWER_DOWN_FORCE",
                          "reason=burstd crash test reset"], check=False)
            self.bed.run(["scontrol", "update", f"nodename={','.join(self.nodes)}", "state=RESUME"], check=False)
            wait_for(self.nodes_clean_down, 90, "cloud nodes cleanly powered down")

    def wait(self, pred, what: str, timeout: float = 90) -> None:
        try:
            wait_for(pred, timeout, what, interval=0.5)
        except AssertionError as exc:
            states = {n: self.bed.node(n).get("State") for n in self.nodes}
            with self.store() as store:
                ls = [(x.node_name, x.state.value, x.reason) for x in store.leases() if x.state not in FINAL_STATES]
            raise AssertionError(f"{exc}\nslurm: {states}\nopen leases: {ls}\nlog:\n{self.daemon.log_tail(40)}")

    def close(self) -> None:
        self.daemon.stop()
        cleanup_vms(self.cfg_path)
        try:
            self.reset_nodes()
        finally:
            cleanup_vms(self.cfg_path)


@pytest.fixture
def storm(slurm_bed, tmp_path):
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd", daemon={"cycle_interval_s": 1})
    s = Storm(slurm_bed, cfg_path, tmp_path / "burstd.log")
    s.reset_nodes()
    cleanup_vms(cfg_path)
    with slurm_bed.hooks("burstd"):
        try:
            yield s
        finally:
            s.close()


def test_sigkill_at_50_plus_points_of_launch_and_terminate_storms_leaves_one_vm_per_lease(storm, slurm_bed,
                                                                                          bed_user):
    random.seed(6)
    held: list[int] = []

    def submit(script: str) -> list[int]:
        return [slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-n", "2", "-t", "10", "-o", "out-%j.txt"],
                                 script, user=bed_user) for _ in storm.nodes]

    def launch_storm() -> None:
        held[:] = submit("#!/bin/sh\nhostname\nsleep 600\n")

    def terminate_storm() -> None:
        slurm_bed.run(["scancel", *map(str, held)])
        storm.scontrol_nodes("POWER_DOWN_ASAP")

    for launch, terminate in zip(LAUNCH_CHAINS[:-1], TERMINATE_CHAINS[:-1], strict=True):
        storm.run_chain(launch, launch_storm)
        storm.wait(storm.settled_up, "every node up with one READY lease and one VM")
        storm.check_invariants()
        storm.run_chain(terminate, terminate_storm)
        storm.wait(storm.settled_down, "every node down, every lease closed, no VM")
        storm.check_invariants()
        storm.daemon.stop()

    for _ in range(2):  # random instants, inside provider calls
        storm.random_kill(launch_storm, lo=0.5, hi=3.0)
        storm.wait(storm.settled_up, "up after a random kill")
        storm.check_invariants()
        storm.random_kill(terminate_storm, lo=0.2, hi=2.0)
        storm.wait(storm.settled_down, "down after a random kill")
        storm.check_invariants()
        storm.daemon.stop()

    # the last storm's jobs are short: every one of them must complete despite the crashes
    jobs: list[int] = []
    storm.run_chain(LAUNCH_CHAINS[-1], lambda: jobs.extend(submit("#!/bin/sh\nhostname\nsleep 2\n")))

    def jobs_done():
        states = {j: slurm_bed.job(j).get("JobState") for j in jobs}
        return all(s == "COMPLETED" for s in states.values()) and states

    storm.wait(jobs_done, "every job of the crashed storm COMPLETED", timeout=240)
    storm.check_invariants()
    hosts = {(slurm_bed.workdir(bed_user) / f"out-{j}.txt").read_text().split()[0] for j in jobs}
    assert hosts <= set(storm.nodes)
    # idle now: Slurm suspends the nodes after SuspendTime; crash through those terminations too
    storm.daemon.stop()
    storm.run_chain(TERMINATE_CHAINS[-1], lambda: None)
    storm.wait(storm.settled_down, "every node down after the jobs", timeout=120)
    storm.check_invariants()

    kills = sum(storm.crashes.values()) + storm.random_kills
    print(f"\nkills: {kills} ({sum(storm.crashes.values())} at named points, {storm.random_kills} random or "
          f"unreached); by point: {dict(storm.crashes)}; unreached: {storm.unreached}")
    assert kills >= 50
    named = {"launch.before_launching", "launch.before_provider", "launch.after_provider", "launch.after_booting",
             "ready.before", "terminate.before_provider", "terminate.after_provider", "cycle.after_snapshot"}
    assert named <= set(storm.crashes), f"never crashed at: {named - set(storm.crashes)}"
