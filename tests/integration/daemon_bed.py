"""Shared by the daemon's integration tests: a burstd config for the live bed, and a running daemon."""

from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from burstd.config import load_config
from burstd.daemon.client import ApiClient
from burstd.testbed.daemon_process import DaemonProcess, config_with


def bed_daemon_config(bed, directory: Path, **tables) -> Path:
    """The bed's burstd config (same socket the bed's hooks call), with a fresh database and state dir."""
    directory.mkdir(parents=True, exist_ok=True)
    base = Path(bed.burstd_config).read_text()
    settings = {
        "database": {"url": f"sqlite:///{directory}/burstd.db"},
        "daemon": {"state_dir": str(directory / "state"), "cycle_interval_s": 2, "orphan_grace_s": 10,
                   "launch_timeout_s": 60, "boot_timeout_s": 90, "log_format": "json"},
        "policy.waiting": {"kind": "constant", "min_wait_s": 3, "min_expected_wait_s": 0},
        "budget": {"default_account_usd": 100},
    }
    for name, keys in tables.items():
        settings.setdefault(name, {}).update(keys)
    path = directory / "burstd.toml"
    path.write_text(config_with(base, settings))
    return path


def world_readable_dir(prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)
    return d


def leases(config_path: Path, all_: bool = True) -> list[dict]:
    cfg = load_config(config_path)
    with ApiClient(cfg.api.socket) as api:
        return api.get("/v1/leases", all=all_ or None)


def cloud_namespaces(bed) -> set[str]:
    from burstd.providers.local import netns

    names = {f"{bed.netns_prefix}{node}" for node in bed.cloud_nodes}
    return netns.list_netns() & names


def cleanup_vms(config_path: Path) -> list[str]:
    """Terminate whatever VMs of this config's pools are left (a failed test must not leak into the next)."""
    from burstd.daemon.wiring import make_providers

    cfg = load_config(config_path)
    left = []
    for provider in make_providers(cfg).values():
        insts = [i for i in provider.list_instances() if not i.is_gone]
        if insts:
            provider.terminate([i.instance_id for i in insts])
            left += [i.node_name for i in insts]
    return left


def plainly_powered_down(bed, nodes) -> bool:
    """Every node in ``nodes`` idle and powered down, not DOWN and not on its way anywhere. RESERVED says nothing
    of power: it is burstd's reservation over the cloud nodes, there while a daemon keeps its cloud gate."""
    return all(set(bed.node(n).get("State", "").split("+")) - {"NOT_RESPONDING", "RESERVED"}
               == {"IDLE", "CLOUD", "POWERED_DOWN"} for n in nodes)


def reset_cloud_gate(bed, config_path: Path, before_a_test: bool = False) -> None:
    """Take away what the daemon's cloud gate left in Slurm (by design it outlives the daemon): the cloud
    partitions' account lists and burstd's reservation, so the bed's next test starts from slurm.conf."""
    from tests.bed import reset_cloud_gate as reset_bed_gate

    wait_s = 30.0  # retried: a job of the last test may still be ending in it
    left = reset_bed_gate(bed, [pool.partition for pool in load_config(config_path).pools], wait_s)
    assert not (before_a_test and left), \
        f"burstd's reservations {left} outlived {wait_s:.0f} s of deletes: a job runs there?"


@contextlib.contextmanager
def running_daemon(bed, config_path: Path, log_path: Path):
    d = DaemonProcess(config_path, log_path=log_path)
    bed.reset_cloud_nodes()  # an earlier test may have left cloud nodes drained, down or powering down
    reset_cloud_gate(bed, config_path, before_a_test=True)
    with bed.hooks("burstd"):
        d.start()
        try:
            d.wait_first_cycle()  # the cloud gate is set: a job the test submits now cannot slip past it
            yield d
        finally:
            d.stop()
            cleanup_vms(config_path)
            reset_cloud_gate(bed, config_path)


def wait_for(pred, timeout: float, what: str, interval: float = 0.5,
             diagnose: Callable[[], str] | None = None):
    """Poll ``pred`` until it returns something truthy. On timeout (or when ``pred`` itself fails an assertion)
    the AssertionError carries ``diagnose()``: what was going on, not just the last value."""
    deadline = time.monotonic() + timeout
    last = None
    try:
        while time.monotonic() < deadline:
            last = pred()
            if last:
                return last
            time.sleep(interval)
    except AssertionError as exc:
        raise AssertionError(f"while waiting for {what}: {exc}{_diagnosis(diagnose)}") from None
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){_diagnosis(diagnose)}")


def _diagnosis(diagnose: Callable[[], str] | None) -> str:
    if diagnose is None:
        return ""
    try:
        return "\n" + diagnose()
    except Exception as exc:  # noqa: BLE001 - the diagnosis must never hide the failure it explains
        return f"\n(diagnosis failed: {exc!r})"


# --- gated jobs: no job can finish before the test says so ----------------------------------------------------

BAD_JOB_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
GATE_WAIT_S = 240  # how long a gated job waits for its gate before it gives up (and fails)


class Gate:
    """A file the test creates to let its jobs finish. A gated job prints its hostname, then waits for the file
    (at most ``wait_s``; a job whose gate never opened exits 3, so it shows as FAILED, not COMPLETED). The file
    lives in the user's work dir on the host; the namespace VMs share the host's file system."""

    def __init__(self, bed, user: str, wait_s: int = GATE_WAIT_S):
        self.path = bed.workdir(user) / f"gate-{time.time_ns()}"
        self.wait_s = wait_s

    def script(self) -> str:
        gate = shlex.quote(str(self.path))
        return ("#!/bin/sh\nhostname\ni=0\n"
                f"while [ ! -e {gate} ]; do\n"
                f"  i=$((i + 1)); [ $i -gt {2 * self.wait_s} ] && {{ echo 'gate never opened' >&2; exit 3; }}\n"
                "  sleep 0.5\ndone\n")

    def open(self) -> None:
        self.path.touch()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def job_states(bed, jobs: Iterable[int]) -> dict[int, str | None]:
    return {j: bed.job(j).get("JobState") for j in jobs}


def all_jobs(bed, jobs: list[int], state: str) -> Callable[[], dict | bool]:
    """A ``wait_for`` predicate: every job in ``state`` at once (its states), failing fast on a job gone bad."""
    def check():
        states = job_states(bed, jobs)
        bad = {j: s for j, s in states.items() if s in BAD_JOB_STATES}
        assert not bad, f"jobs ended badly: {bad}"
        return all(s == state for s in states.values()) and states
    return check


def fill_onprem(bed, script: str, user: str, opts: Sequence[str] = ()) -> list[int]:
    """Fill every on-prem node with one whole-node job pinned to it (``-w``), running; returns their ids.

    Pinned, because a blocker left free to go anywhere can pend for a moment (a node still COMPLETING the last
    test's job), be burst by the daemon and run on a cloud node, which leaves an on-prem node free for the very
    jobs the test means to see burst."""
    jobs = [bed.sbatch(["-p", bed.onprem_partition, "-w", node, "-N", "1", "-n", str(bed.config.onprem_cpus),
                        *opts], script, user=user) for node in bed.onprem_nodes]
    wait_for(all_jobs(bed, jobs, "RUNNING"), 60, "the on-prem nodes full")
    where = {j: bed.job(j).get("NodeList") for j in jobs}
    assert sorted(where.values()) == sorted(bed.onprem_nodes), where
    return jobs


def diagnosis(bed, jobs: Iterable[int] = (), config_path: Path | None = None, daemon=None,
              extra: Callable[[], str] | None = None) -> Callable[[], str]:
    """What to print when a daemon test's wait times out: every job's state, reason and nodes, every node's
    Slurm state (cloud nodes with their reason), the leases and the daemon's log tail."""
    jobs = list(jobs)

    def text() -> str:
        out = []

        def part(title: str, fn: Callable[[], str]) -> None:
            try:
                out.append(f"{title}: {fn()}")
            except Exception as exc:  # noqa: BLE001
                out.append(f"{title}: unavailable ({exc!r})")

        def job_lines() -> str:
            rows = []
            for j in jobs:
                info = bed.job(j)
                rows.append(f"\n  {j}: {info.get('JobState')} reason={info.get('Reason')} "
                            f"partition={info.get('Partition')} nodes={info.get('NodeList')}")
            return "".join(rows) or "none"

        def cloud_lines() -> str:
            rows = []
            for n in bed.cloud_nodes:
                info = bed.node(n)
                rows.append(f"\n  {n}: {info.get('State')} reason={info.get('Reason', '')}")
            return "".join(rows)

        def lease_lines() -> str:
            rows = leases(config_path)
            return "".join(f"\n  {r.get('node_name')}: {r.get('state')} jobs={r.get('job_ids')} "
                           f"reason={r.get('reason')}" for r in rows) or "none"

        part("jobs", job_lines)
        part("slurm nodes", lambda: str(bed.node_states()))
        part("cloud nodes", cloud_lines)
        if config_path is not None:
            part("leases", lease_lines)
        if extra is not None:
            part("more", extra)
        if daemon is not None:
            part("daemon log tail", lambda: "\n" + daemon.log_tail(40))
        return "\n".join(out)

    return text
