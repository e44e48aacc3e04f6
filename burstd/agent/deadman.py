"""The dead-man switch: a cloud node that has lost every burstd powers itself off, so the spend stops even when
no head node is left to terminate it (docs/ha.md, docs/agent.md).

    switch = DeadManSwitch(node, timeout_s=600, probe=probe_daemons(urls, node, token_file), busy=node_runs_a_job,
                           power_off=run_command(["systemctl", "poweroff"]))
    switch.check()          # each agent poll (it probes every probe_every(deadman_s)); why it powered off, or None

Rules: reached a burstd lately -> nothing; no burstd for ``timeout_s`` and no job on the node -> power off;
a job runs -> wait, however long (a short head-node outage must never kill a job; the job's own time limit
bounds the wait); a burstd answered and this node has no open lease -> the lease is over: power off. The power
off is the VM's normal shutdown (``poweroff_command``), which the cloud bills as stopped/terminated.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from enum import Enum

import httpx

from burstd.agent.report import ReportConfigError, _client

log = logging.getLogger("burstd.agent")


class Probe(Enum):
    LEASE_OPEN = "lease open"  # a burstd answered and this node has an open lease
    LEASE_OVER = "lease over"  # a burstd answered and this node has none: nothing will ever terminate it
    REACHED = "reached"  # a burstd answered, the lease is unknown (no read rights): contact, nothing more
    UNREACHABLE = "unreachable"


def probe_daemons(urls: Sequence[str], node: str, token_file: str | None = None, ca_file: str | None = None,
                  timeout_s: float = 3.0) -> Callable[[], Probe]:
    """Ask each burstd (both heads of an active/standby pair) in turn; the first that answers decides. The agent's
    credential may not read leases: then an answer is contact, nothing more."""
    def probe() -> Probe:
        for url in urls:
            try:
                client, base = _client(url, token_file, timeout_s, ca_file)
            except (ReportConfigError, OSError) as exc:
                # our own settings are wrong (plain http, a readable token): never power off for that
                log.error("dead-man switch cannot probe %s: %s", url, exc)
                return Probe.REACHED
            try:
                with client:
                    health = client.get(base + "/healthz")
                    if health.status_code >= 500:
                        continue
                    # this node's leases only: the daemon answers every VM's probe, so none may cost O(leases)
                    r = client.get(base + "/v1/leases", params={"node": node})
                if r.status_code != 200:
                    return Probe.REACHED
                return Probe.LEASE_OPEN if any(x.get("node_name") == node for x in r.json()) else Probe.LEASE_OVER
            except (httpx.HTTPError, OSError, ValueError) as exc:
                log.warning("burstd unreachable at %s: %s", url, exc)
        return Probe.UNREACHABLE
    return probe


def node_runs_a_job(proc: str = "/proc") -> bool:
    """A Slurm step daemon in this node's network namespace (a real VM has one; a bed VM shares the host's pids)."""
    try:
        own = os.readlink(f"{proc}/self/ns/net")
    except OSError:
        own = None
    return any(is_step_daemon(pid, own, proc) for pid in filter(str.isdigit, os.listdir(proc)))


def is_step_daemon(pid: str, netns: str | None, proc: str = "/proc") -> bool:
    """Is ``pid`` a ``slurmstepd`` whose real and effective uid are root, in network namespace ``netns`` (None: any)?

    slurmd starts the step daemon as root and it stays root while the job's tasks run as the user; any job can
    name a process of its own ``slurmstepd`` (``exec -a``, a copied binary, ``prctl``) and would otherwise keep an
    idle VM up for ever. Its parent is no test: slurmd forks twice, so a real one is adopted by init."""
    try:
        with open(f"{proc}/{pid}/comm") as fh:
            if fh.read().strip() != "slurmstepd":
                return False
        with open(f"{proc}/{pid}/status") as fh:  # Uid: real, effective, saved, filesystem
            uids = next((line.split()[1:3] for line in fh if line.startswith("Uid:")), [])
        if uids != ["0", "0"]:
            return False
        return netns is None or os.readlink(f"{proc}/{pid}/ns/net") == netns
    except OSError:  # gone meanwhile
        return False


def run_command(argv: Sequence[str]) -> Callable[[str], None]:
    def power_off(why: str) -> None:
        log.critical("dead-man switch: powering off (%s): %s", why, " ".join(argv))
        try:  # a missing or hanging command must not kill the agent: it still has notices to watch
            rc = subprocess.run(list(argv), check=False, timeout=60).returncode
        except (OSError, subprocess.SubprocessError) as exc:
            log.error("dead-man switch: power-off command failed: %s", exc)
            return
        if rc != 0:
            log.error("dead-man switch: power-off command exited %s", rc)
    return power_off


def probe_every(deadman_s: float) -> float:
    """How often a node in touch with burstd asks again: a tenth of ``deadman_s``, at most 30 s. Every VM's agent
    asks, so a fleet of N nodes costs the daemon N/30 probes a second (two small requests each), not N; an outage is
    counted from the first probe that found no burstd, so the switch fires at most this much late, never early."""
    return min(30.0, deadman_s / 10)


class DeadManSwitch:
    def __init__(self, node: str, *, timeout_s: float, probe: Callable[[], Probe], busy: Callable[[], bool],
                 power_off: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                 probe_every_s: float = 0.0):
        self.node, self.timeout_s, self.probe_every_s = node, timeout_s, probe_every_s
        self._probe, self._busy, self._power_off, self._clock = probe, busy, power_off, clock
        # No burstd seen since: from boot (a node that never reaches burstd goes too); None while in touch.
        self.silent_since: float | None = clock()
        self._last_probe = float("-inf")
        self.fired: str | None = None

    def check(self) -> str | None:
        """One look (each agent poll): probes when due, powers off at most once. Returns why it powered off (now
        or before), else None. In touch, the next probe waits ``probe_every_s``; out of touch, every look probes."""
        if self.fired is not None:
            return self.fired
        now = self._clock()
        if self.silent_since is None and now - self._last_probe < self.probe_every_s:
            return None
        self._last_probe = now
        seen = self._probe()
        now = self._clock()
        why = None
        if seen is not Probe.UNREACHABLE:
            self.silent_since = None
            if seen is Probe.LEASE_OVER:
                why = f"burstd has no open lease for {self.node}"
        else:
            if self.silent_since is None:
                self.silent_since = now
            silent = now - self.silent_since
            if silent >= self.timeout_s:
                if self._busy():
                    log.warning("no burstd reachable for %.0fs, but a job runs on %s: staying up", silent, self.node)
                else:
                    why = f"no burstd reachable for {silent:.0f}s and no job on {self.node}"
        if why is not None:
            self.fired = why
            self._power_off(why)
        return why
