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
from dataclasses import dataclass
from pathlib import Path

from burstd.cli.common import console
from burstd.cli.demo_watch import job_summary, submit_jobs, watch_jobs

LEASE_S, RENEW_S = 6.0, 2.0  # failover bound: 8 s after the leader's last renewal


def ha_configs(bed, work: Path, db_url: str, min_wait_s: float) -> tuple[Path, Path]:
    """(head-a, head-b): the same cluster, database and VM records; each its own state dir and socket. head-a
    keeps the bed's socket (the hooks call it). Each VM's agent tries the other head after its own."""
    from burstd.testbed.daemon_process import config_with

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


@dataclass
class _Kill:
    """What the HA demo saw of its kill: the leases when head-b died, how long the failover took, duplicates."""

    leases_at_kill: dict[str, int] | None = None
    failover_s: float | None = None
    duplicates: int = 0


def run_storm(bed, work: Path, *, jobs: int, job_seconds: int, user: str, min_wait: float, timeout: float) -> dict:
    """Start PostgreSQL and both heads, submit, kill the leader mid-storm, wait for the end; the summary."""
    from burstd.config import load_config
    from burstd.testbed.daemon_process import DaemonProcess
    from burstd.daemon.wiring import make_providers
    from burstd.domain.lease import FINAL_STATES, LeaseState
    from burstd.testbed.pg import ThrowawayPostgres

    with ThrowawayPostgres() as pg:
        a_path, b_path = ha_configs(bed, work, pg.url(), min_wait)
        cfg = load_config(a_path)
        prefix = cfg.pools[0].node_prefix
        head_a = DaemonProcess(a_path, log_path=work / "head-a" / "burstd.log")
        head_b = DaemonProcess(b_path, log_path=work / "head-b" / "burstd.log")
        provider = make_providers(cfg)[cfg.pools[0].name]
        final = {s.value for s in FINAL_STATES}
        seen = _Kill()

        def look(api, rows: list[dict]) -> tuple[list[dict], str | None]:
            """Count duplicates at every look; kill head-b once a launch is under way and time the failover."""
            if seen.leases_at_kill is None and any(r["state"] == LeaseState.REQUESTED.value for r in rows):
                rows = _storm_under_way(api, rows)  # look closely: the launches take a second
            leases = Counter(r["state"] for r in rows)
            seen.duplicates = max(seen.duplicates, duplicates(provider.list_instances(),
                                                      [r for r in rows if r["state"] not in final]))
            # mid-storm: a launch under way (or, if the look missed that, a VM up with jobs left)
            if seen.leases_at_kill is None and any(leases[s.value] for s in (
                    LeaseState.LAUNCHING, LeaseState.BOOTING, LeaseState.READY)):
                head_b.kill()  # mid-storm, no goodbye: the lead must lapse
                t0 = time.monotonic()
                seen.leases_at_kill = dict(leases)
                if wait_role(head_a.socket, "leader", 4 * (LEASE_S + RENEW_S)):
                    seen.failover_s = round(time.monotonic() - t0, 2)
                return rows, f"leader head-b killed; head-a leads after {seen.failover_s}s"
            return rows, None

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
                console.print(f"[bold]3/5[/] submitting {jobs} whole-node jobs as [cyan]{user}[/]; head-b is "
                              "SIGKILLed as soon as a cloud launch is under way...")
                ids = submit_jobs(bed, user, jobs=jobs, job_seconds=job_seconds)
                phase = watch_jobs(bed, ids, cfg.api.socket, prefix, timeout=timeout, look=look)
                console.print("[bold]4/5[/] summary")
                return job_summary(bed, ids, user, prefix, cfg.api.socket, provider, phase) | {
                    "duplicate_vms": seen.duplicates,
                    "failover_s": seen.failover_s,
                    "failover_bound_s": LEASE_S + RENEW_S,
                    "leader_killed": "head-b" if seen.leases_at_kill is not None else None,
                    "leases_at_kill": seen.leases_at_kill,
                    "leader_after": "head-a" if role(head_a.socket) == "leader" else None,
                }
        finally:
            head_b.kill()
            head_a.stop()
            left = [i.instance_id for i in provider.list_instances() if not i.is_gone]
            if left:
                provider.terminate(left)
