"""``burstctl demo --ha``: the demo with two burstd daemons on one throwaway PostgreSQL, the leader SIGKILLed in
the middle of the launch storm (docs/ha.md).

    head-b  leads first (its own control socket); head-a is the standby on the bed's socket, the one Slurm's hooks
            call, so the resumes go to the standby, which stores them for the leader
    storm   as soon as a lease is LAUNCHING or BOOTING, head-b is SIGKILLed; head-a must lead within
            ha.lease_s + ha.renew_interval_s and finish the storm: every job completes, one VM per lease, none left

The summary adds ``failover_s`` (kill to head-a reporting itself leader), ``failover_bound_s``, ``duplicate_vms``
(the most VMs beyond one per lease, or open leases beyond one per node, seen at any look) and ``leader_killed``.
"""

from __future__ import annotations

import time
import tomllib
from collections import Counter
from pathlib import Path

from burstd.cli.common import console

LEASE_S, RENEW_S = 6.0, 2.0  # failover bound: 8 s after the leader's last renewal


def ha_configs(bed, work: Path, db_url: str, min_wait_s: float) -> tuple[Path, Path]:
    """(head-a, head-b): the same cluster, database and VM records; each its own state dir and socket. head-a
    keeps the bed's socket (the hooks call it). Each VM's agent tries the other head after its own."""
    from burstd.daemon.runner import config_with

    base = Path(bed.burstd_config).read_text()
    hook_socket = str(tomllib.loads(base)["api"]["socket"])
    sockets = {"head-a": hook_socket, "head-b": str(work / "head-b" / "burstd.sock")}
    paths = []
    for name, other in (("head-a", "head-b"), ("head-b", "head-a")):
        d = work / name
        d.mkdir(parents=True, exist_ok=True)
        text = config_with(base, {
            "database": {"url": db_url},
            "api": {"socket": sockets[name]},
            "daemon": {"state_dir": str(d / "state"), "cycle_interval_s": 2, "log_format": "json"},
            "policy.waiting": {"kind": "constant", "min_wait_s": min_wait_s, "min_expected_wait_s": 0},
            "budget": {"default_account_usd": 50},
            "ha": {"enabled": True, "lease_s": LEASE_S, "renew_interval_s": RENEW_S, "node_id": name},
            "agent": {"standby_daemon_urls": [f"unix:{sockets[other]}"]},
            "pools.local": {"records_dir": str(work / "vms")},  # one "cloud" for both heads
        })
        (d / "burstd.toml").write_text(text)
        paths.append(d / "burstd.toml")
    return paths[0], paths[1]


def role(socket: str) -> str | None:
    from burstd.daemon.client import ApiClient

    try:
        with ApiClient(socket, timeout=2) as api:
            return (api.get("/v1/status").get("ha") or {}).get("role")
    except Exception:  # noqa: BLE001 - dead or starting: no role
        return None


def wait_role(socket: str, want: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if role(socket) == want:
            return True
        time.sleep(0.05)
    return False


def duplicates(instances, open_leases: list[dict]) -> int:
    """VMs beyond one per lease, plus open leases beyond one per node (pure: the caller looks)."""
    per_lease = Counter(i.lease_id for i in instances if not i.is_gone)
    per_node = Counter(x["node_name"] for x in open_leases)
    return sum(n - 1 for n in per_lease.values() if n > 1) + sum(n - 1 for n in per_node.values() if n > 1)


def _storm_under_way(api, rows: list[dict], timeout: float = 20.0) -> list[dict]:
    """Poll the leases every 0.1 s until a launch is under way (LAUNCHING or BOOTING) or nothing is REQUESTED."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {r["state"] for r in rows}
        if states & {"LAUNCHING", "BOOTING"} or "REQUESTED" not in states:
            return rows
        time.sleep(0.1)
        rows = api.get("/v1/leases", all=True)
    return rows


def run_storm(bed, work: Path, *, jobs: int, job_seconds: int, user: str, min_wait: float, timeout: float,
              watch) -> dict:
    """Start PostgreSQL and both heads, submit, kill the leader mid-storm, wait for the end; the summary."""
    from burstd.config import load_config
    from burstd.daemon.client import ApiClient
    from burstd.daemon.runner import DaemonProcess
    from burstd.daemon.wiring import make_providers
    from burstd.domain.lease import FINAL_STATES, LeaseState
    from burstd.testbed.pg import ThrowawayPostgres

    from burstd.cli.demo_cmd import host_of_jobs, leaked

    with ThrowawayPostgres() as pg:
        a_path, b_path = ha_configs(bed, work, pg.url(), min_wait)
        cfg = load_config(a_path)
        prefix = cfg.pools[0].node_prefix
        head_a = DaemonProcess(a_path, log_path=work / "head-a" / "burstd.log")
        head_b = DaemonProcess(b_path, log_path=work / "head-b" / "burstd.log")
        provider = make_providers(cfg)[cfg.pools[0].name]
        final = {s.value for s in FINAL_STATES}
        try:
            with bed.hooks("burstd"):
                console.print(f"[bold]2/5[/] starting burstd head-b (leader) and head-a (standby, on the hooks' "
                              f"socket), PostgreSQL at {pg.socket_dir}...")
                head_b.start()
                if not wait_role(head_b.socket, "leader", 3 * LEASE_S):
                    raise RuntimeError(f"head-b did not become leader; see {head_b.log_path}")
                head_a.start()
                if not wait_role(head_a.socket, "standby", 3 * LEASE_S):
                    raise RuntimeError(f"head-a did not come up as standby; see {head_a.log_path}")
                cpus = bed.config.onprem_cpus
                console.print(f"[bold]3/5[/] submitting {jobs} whole-node jobs as [cyan]{user}[/]; head-b is "
                              "SIGKILLed as soon as a cloud launch is under way...")
                script = f"#!/bin/sh\nhostname\nsleep {job_seconds}\n"
                ids = [bed.sbatch(["-p", bed.onprem_partition, "-N", "1", "-n", str(cpus), "-t", "10",
                                   "-o", "demo-%j.out"], script, user=user) for _ in range(jobs)]
                phase, failover_s, killed_at, dup = "jobs pending on-prem, waiting to burst", None, None, 0
                deadline = time.monotonic() + timeout
                api = ApiClient(cfg.api.socket)
                with watch() as live:
                    while time.monotonic() < deadline:
                        infos = {j: bed.job(j) for j in ids}
                        nodes = bed.node_states(bed.cloud_partition)
                        rows = api.get("/v1/leases", all=True)
                        if killed_at is None and any(r["state"] == LeaseState.REQUESTED.value for r in rows):
                            rows = _storm_under_way(api, rows)  # look closely: the launches take a second
                        leases = Counter(r["state"] for r in rows)
                        dup = max(dup, duplicates(provider.list_instances(),
                                                  [r for r in rows if r["state"] not in final]))
                        # mid-storm: a launch under way (or, if the look missed that, a VM up with jobs left)
                        if killed_at is None and any(leases[s.value] for s in (
                                LeaseState.LAUNCHING, LeaseState.BOOTING, LeaseState.READY)):
                            head_b.kill()  # mid-storm, no goodbye: the lead must lapse
                            t0 = time.monotonic()
                            killed_at = dict(leases)
                            if wait_role(head_a.socket, "leader", 4 * (LEASE_S + RENEW_S)):
                                failover_s = round(time.monotonic() - t0, 2)
                            phase = f"leader head-b killed; head-a leads after {failover_s}s"
                            continue
                        done = all(i.get("JobState") == "COMPLETED" for i in infos.values())
                        open_leases = sum(v for k, v in leases.items() if k not in final)
                        if done:
                            phase = "all jobs done; cloud nodes suspend after idle"
                        live.update(infos, nodes, leases, prefix, phase)
                        if done and rows and open_leases == 0 and all(s.endswith("~") for s in nodes.values()):
                            phase = "finished"
                            live.update(infos, nodes, leases, prefix, phase)
                            break
                        time.sleep(1)
                api.close()
                console.print("[bold]4/5[/] summary")
                hosts = host_of_jobs(bed, user, ids)
                with ApiClient(cfg.api.socket) as api:
                    rows = api.get("/v1/leases", all=True)
                return {
                    "jobs_submitted": len(ids),
                    "jobs_completed": sum(1 for j in ids if bed.job(j).get("JobState") == "COMPLETED"),
                    "jobs_on_cloud": sum(1 for h in hosts.values() if h.startswith(prefix)),
                    "jobs_on_prem": sum(1 for h in hosts.values() if h and not h.startswith(prefix)),
                    "leases_by_state": dict(Counter(r["state"] for r in rows)),
                    "leaked_vms": leaked(bed, provider),
                    "duplicate_vms": dup,
                    "failover_s": failover_s,
                    "failover_bound_s": LEASE_S + RENEW_S,
                    "leader_killed": "head-b" if killed_at is not None else None,
                    "leases_at_kill": killed_at,
                    "leader_after": "head-a" if role(head_a.socket) == "leader" else None,
                    "finished": phase == "finished",
                    "slurm_version": bed.status().get("slurm_version"),
                    "accounting": bed.accounting.dbd_pid() is not None,
                    "hosts": {str(j): h for j, h in hosts.items()},
                }
        finally:
            head_b.kill()
            head_a.stop()
            left = [i.instance_id for i in provider.list_instances() if not i.is_gone]
            if left:
                provider.terminate(left)
