"""Spot preemption for the local provider: per-VM metadata endpoint and agent, notices, reclaim at deadline.

    extra = start_vm_services(netns="sl-cloud1", node="cloud1", address="10.77.0.101",
                              instance_id="ns-sl-cloud1", records_dir=records, agent_argv=[...])
    deadline = preempt(records, "sl-cloud1", notice_s=30)   # announce now, reclaim in 30 s

What a local "VM" gets at launch (``start_vm_services``, called by the LocalProvider after the namespace
exists): 169.254.169.254 on its loopback, a metadata server (``burstd.providers.local.metadata``, IMDSv2
shapes) listening inside the namespace, and ``burstd-agent --provider local`` watching it. Both live in the
namespace, so destroying the VM stops them.

A preemption (``preempt``: ``burstctl preempt NODE``, or at random at ``preempt_rate_per_hour`` through
``RandomPreemptions``) writes the notice into the VM's metadata state directory and starts a detached
reclaimer (``python -m burstd.providers.local.preemption reclaim ...``) that destroys the VM at the
deadline and keeps its record with state ``preempted``, so the provider lists it as reclaimed. The
reclaimer is its own process: a daemon restart does not cancel a reclaim, as a real cloud would not.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import burstd
from burstd.providers.local.metadata import (
    LINK_LOCAL,
    Identity,
    add_link_local_alias,
    announce_preemption,
    clear_notices,
    lock_to_root,
    read_notice,
    server_argv,
)

log = logging.getLogger("burstd.providers.local")

SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PREEMPTED = "preempted"


def records_dir_of(cfg, pool) -> Path:
    """The local provider's VM records directory for a pool (where each VM's metadata state also lives)."""
    explicit = getattr(pool.local, "records_dir", None) if pool.local else None
    return Path(explicit or Path(cfg.daemon.state_dir) / "local" / pool.name)


def vm_alive(records_dir: str | os.PathLike, netns: str) -> bool:
    return (Path("/run/netns") / netns).exists()


def metadata_dir(records_dir: str | os.PathLike, netns: str) -> Path:
    """Where a VM's metadata state (the announced notice) lives."""
    return Path(records_dir) / f"{netns}.imds"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment for what runs in a VM: burstd importable (also from a source checkout), no
    Slurm job variables leaking in from a hook's environment (the agent must not look like a job)."""
    root = str(Path(burstd.__file__).resolve().parent.parent)
    env = {"PATH": SANE_PATH, "LANG": "C.UTF-8", "PYTHONPATH": root, "PYTHONUNBUFFERED": "1"}
    if os.environ.get("SLURM_CONF"):
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    env.update(extra or {})
    return env


def _spawn(argv: list[str], log_path: Path, env: dict[str, str]) -> int:
    """Start a detached process (own session, no stdin), appending its output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    return p.pid


def agent_argv(
    node: str,
    *,
    metadata_port: int,
    poll_interval_s: float | None = None,
    config: str | None = None,
    daemon_url: str | None = None,
    signal: str | None = None,
    slurm_bin_dir: str | None = None,
    slurm_conf: str | None = None,
    standby_daemon_urls: Iterable[str] = (),
    deadman_s: float | None = None,
    poweroff_command: Iterable[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """burstd-agent as the local provider runs it inside a VM."""
    argv = [
        python,
        "-m",
        "burstd.agent.main",
        "--provider",
        "local",
        "--node",
        node,
        "--metadata-url",
        f"http://{LINK_LOCAL}:{metadata_port}",
    ]
    if config:
        argv += ["--config", config]
    if poll_interval_s is not None:
        argv += ["--poll-interval", str(poll_interval_s)]
    if daemon_url:
        argv += ["--daemon-url", daemon_url]
    if signal:
        argv += ["--signal", signal]
    if slurm_bin_dir:
        argv += ["--slurm-bin-dir", slurm_bin_dir]
    if slurm_conf:
        argv += ["--slurm-conf", slurm_conf]
    argv += [f"--standby-daemon-url={u}" for u in standby_daemon_urls]
    if deadman_s is not None:
        argv += ["--deadman", str(deadman_s)]
    argv += [f"--poweroff-arg={word}" for word in poweroff_command]
    return argv


def poweroff_argv(records_dir: str | os.PathLike, netns: str, python: str = sys.executable) -> list[str]:
    """The local VM's own shutdown (``systemctl poweroff`` in a bed VM would power off the host)."""
    return [python, "-m", "burstd.providers.local.preemption", "poweroff", "--records-dir", str(records_dir),
            "--netns", netns]


def power_off_from_inside(records_dir: str | os.PathLike, netns: str) -> int:
    """A guest-initiated shutdown, run by a process inside the VM: everything else in it ends (SIGTERM, then
    SIGKILL), its record goes (a cloud lists a VM shut down from inside as terminated: with AWS's
    InstanceInitiatedShutdownBehavior=terminate it is), and the namespace is unlinked. The caller is the last
    process inside; when it exits the kernel frees the namespace and its veth pair. Returns how many
    processes were stopped."""
    from burstd.providers.local import netns as vms  # the bed's namespace primitives

    vms.check_name("namespace", netns)
    records_dir = Path(records_dir)
    with vms.records_lock(records_dir):  # the LocalProvider's lock: never mid-launch/terminate
        clear_notices(metadata_dir(records_dir, netns))  # a pending reclaimer stands down
        stopped = vms.kill_all(netns, spare=os.getpid())
        vms.remove_record(records_dir, netns)
        subprocess.run(["ip", "netns", "del", netns], check=False, capture_output=True)
    return stopped


def vm_services_plan(config, pool, node: str, *, netns: str | None = None,
                     records_dir: str | os.PathLike | None = None) -> tuple[list[str], dict[str, str], int]:
    """(agent argv, extra environment, metadata port) for a VM of ``pool``, from the burstd config.

    The agent reports to this daemon's control socket (unless ``agent.daemon_url`` says otherwise) and
    drains through the same slurm.conf and scontrol as the daemon. Its dead-man switch (``agent.deadman_s``,
    also trying ``agent.standby_daemon_urls``) powers the VM off the local way (``poweroff_argv``), never
    with ``agent.poweroff_command``, which is meant for a real VM; without ``netns`` it is off.
    """
    port = pool.local.metadata_port if pool.local else 1338
    argv = agent_argv(
        node,
        metadata_port=port,
        poll_interval_s=config.agent.poll_interval_s,
        daemon_url=config.agent.daemon_url or f"unix:{config.api.socket}",
        signal=config.agent.signal,
        slurm_bin_dir=config.slurm.bin_dir,
        slurm_conf=config.slurm.conf,
        standby_daemon_urls=config.agent.standby_daemon_urls,
        deadman_s=config.agent.deadman_s if netns else 0,
        poweroff_command=poweroff_argv(records_dir or records_dir_of(config, pool), netns) if netns else (),
    )
    env = {"SLURM_CONF": config.slurm.conf} if config.slurm.conf else {}
    return argv, env, port


def start_vm_services_for(
    config,
    pool,
    *,
    netns: str,
    node: str,
    address: str,
    instance_id: str,
    records_dir: str | os.PathLike,
    tags: dict[str, str] | None = None,
) -> dict[str, str]:
    """``start_vm_services`` with everything taken from the burstd config (the LocalProvider's one call)."""
    argv, env, port = vm_services_plan(config, pool, node, netns=netns, records_dir=records_dir)
    return start_vm_services(
        netns=netns,
        node=node,
        address=address,
        instance_id=instance_id,
        records_dir=records_dir,
        metadata_port=port,
        tags=tags,
        agent=argv,
        env=env,
    )


_NETNS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def start_vm_services(
    *,
    netns: str,
    node: str,
    address: str,
    instance_id: str,
    records_dir: str | os.PathLike,
    metadata_port: int = 1338,
    tags: dict[str, str] | None = None,
    agent: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, str]:
    """Start the metadata endpoint (and, with ``agent`` = an argv from ``agent_argv``, the agent) in ``netns``.

    Returns entries for the VM record's ``extra`` (metadata URL and state dir). Idempotent enough for a
    relaunch: a second metadata server on the same port exits at once (address in use).
    """
    if not _NETNS_RE.fullmatch(netns):
        raise ValueError(f"invalid namespace name {netns!r}")
    state = metadata_dir(records_dir, netns)
    state.mkdir(parents=True, exist_ok=True)
    clear_notices(
        state
    )  # a relaunched VM starts without its predecessor's notice (and its reclaimer stands down)
    add_link_local_alias(netns)
    lock_to_root(netns)  # before anything in the VM runs: no job ever sees an open metadata endpoint
    ident = Identity(instance_id=instance_id, node=node, address=address, tags=dict(tags or {}))
    enter = ["nsenter", f"--net=/run/netns/{netns}", "--"]  # not `ip netns exec` (TESTBED.md gotcha 2)
    full_env = _env(env)
    _spawn(  # on the link-local address only: never reachable from another VM over the bridge
        enter + server_argv(None, state, ident, listen=f"{LINK_LOCAL}:{metadata_port}"),
        state / "metadata.log",
        full_env,
    )
    if agent:
        _spawn(enter + agent, state / "agent.log", full_env)
    return {"metadata_url": f"http://{LINK_LOCAL}:{metadata_port}", "metadata_dir": str(state)}


def reclaimer_argv(
    records_dir: str | os.PathLike, netns: str, deadline: float, python: str = sys.executable
) -> list[str]:
    return [
        python,
        "-m",
        "burstd.providers.local.preemption",
        "reclaim",
        "--records-dir",
        str(records_dir),
        "--netns",
        netns,
        "--at",
        f"{deadline:.3f}",
    ]


def preempt(
    records_dir: str | os.PathLike,
    netns: str,
    notice_s: float,
    *,
    reclaim: bool = True,
    now: float | None = None,
) -> float:
    """Announce a spot interruption on a local VM and (``reclaim``) destroy it at the deadline.

    Returns the deadline. Announcing an already-preempted VM again changes nothing (same deadline, no
    second reclaimer).
    """
    state = metadata_dir(records_dir, netns)
    if notice_s <= 0 and reclaim:
        # no notice at all: the VM is powered off now, and no notice is ever published (the agent sees
        # nothing, exactly as when a cloud pulls the plug)
        deadline = time.time() if now is None else now
        reclaim_now(records_dir, netns)
        log.warning("preempted without notice netns=%s", netns)
        return deadline
    before = read_notice(state)
    deadline = announce_preemption(state, notice_s, now=now)
    if reclaim and before is None:
        _spawn(reclaimer_argv(records_dir, netns, deadline), state / "reclaim.log", _env())
    log.warning("preemption announced netns=%s deadline=%.0f notice_s=%s", netns, deadline, notice_s)
    return deadline


def reclaim_now(records_dir: str | os.PathLike, netns: str) -> bool:
    """Power the VM off at once (SIGKILL to everything in it), keeping its record as ``preempted``."""
    from burstd.providers.local import netns as vms  # the bed's namespace primitives

    records_dir = Path(records_dir)
    with vms.records_lock(records_dir):  # the LocalProvider's lock: never mid-launch/terminate
        return vms.destroy(netns, records_dir, keep_record_as=PREEMPTED, power_off=True)


def reclaim_at(
    records_dir: str | os.PathLike, netns: str, deadline: float, *, sleep=time.sleep, clock=time.time
) -> bool:
    """Sleep until ``deadline``, then destroy the VM keeping its record as ``preempted``.

    Stands down (returns False) when the notice is gone by then: the VM was terminated and launched anew.
    """
    while (left := deadline - clock()) > 0:
        sleep(min(left, 1.0))
    from burstd.providers.local import netns as vms  # the bed's namespace primitives

    records_dir = Path(records_dir)
    with vms.records_lock(records_dir):  # the LocalProvider's lock: never mid-launch/terminate
        notice = read_notice(metadata_dir(records_dir, netns))
        if notice is None or notice[1] != deadline:
            log.info("reclaim of %s stands down: its notice is gone (VM relaunched or terminated)", netns)
            return False
        # a reclaim is a power-off: whatever the notice did not save is lost, honestly
        return vms.destroy(netns, records_dir, keep_record_as=PREEMPTED, power_off=True)


def chaos_argv(
    records_dir: str | os.PathLike,
    netns: str,
    rate_per_hour: float,
    notice_s: float,
    python: str = sys.executable,
) -> list[str]:
    return [
        python,
        "-m",
        "burstd.providers.local.preemption",
        "chaos",
        "--records-dir",
        str(records_dir),
        "--netns",
        netns,
        "--rate",
        str(rate_per_hour),
        "--notice",
        str(notice_s),
    ]


def chaos(
    records_dir: str | os.PathLike,
    netns: str,
    rate_per_hour: float,
    notice_s: float,
    *,
    rng: random.Random | None = None,
    sleep=time.sleep,
    alive=None,
    reclaim: bool = True,
) -> float | None:
    """Preempt ``netns`` after an exponentially distributed time (mean 1/rate); stop when the VM is gone.

    Returns the deadline announced, or None when the VM went away (or was preempted) first.
    """
    rng = rng or random.Random()
    alive = alive or (lambda: vm_alive(records_dir, netns))
    if rate_per_hour <= 0:
        return None
    left = rng.expovariate(rate_per_hour / 3600.0)
    while left > 0:
        if not alive() or read_notice(metadata_dir(records_dir, netns)) is not None:
            return None
        step = min(left, 1.0)
        sleep(step)
        left -= step
    if not alive():
        return None
    return preempt(records_dir, netns, notice_s, reclaim=reclaim)


class PreemptionHook:
    """The LocalProvider's ``VmHook``: each VM gets its metadata endpoint and agent (a VM booted from an image runs
    the image's agent inside it: ``vm_agent``), and (with ``preempt_rate_per_hour`` > 0) a chaos process that
    preempts it at random.

        LocalProvider.from_config(cfg, "local", hooks=[PreemptionHook(cfg, cfg.pool("local"))])
    """

    def __init__(self, config, pool):
        self.config = config
        self.pool = pool
        self.records_dir = records_dir_of(config, pool)

    def vm_started(self, vm) -> dict[str, str]:
        if getattr(vm, "vm_dir", ""):  # booted from an image: the image's agent, started inside the VM
            from burstd.providers.local import vm_agent

            _, env, port = vm_services_plan(self.config, self.pool, vm.node_name)
            extra = start_vm_services(netns=vm.netns, node=vm.node_name, address=vm.ip,
                                      instance_id=vm.instance_id, records_dir=self.records_dir,
                                      metadata_port=port, tags=dict(vm.tags), env=env)
            extra |= vm_agent.start(self.config, vm, records_dir=self.records_dir, metadata_port=port,
                                    state_dir=metadata_dir(self.records_dir, vm.netns), spawn=_spawn,
                                    env=_env(env))
        else:
            extra = start_vm_services_for(
                self.config,
                self.pool,
                netns=vm.netns,
                node=vm.node_name,
                address=vm.ip,
                instance_id=vm.instance_id,
                records_dir=self.records_dir,
                tags=dict(vm.tags),
            )
        local = self.pool.local
        if local is not None and local.preempt_rate_per_hour > 0:
            pid = _spawn(
                chaos_argv(self.records_dir, vm.netns, local.preempt_rate_per_hour, local.notice_s),
                metadata_dir(self.records_dir, vm.netns) / "chaos.log",
                _env(),
            )
            extra["chaos_pid"] = str(pid)
        return extra

    def vm_stopping(self, vm) -> None:
        clear_notices(metadata_dir(self.records_dir, vm.netns))  # a pending reclaimer stands down
        pid = int(vm.extra.get("chaos_pid", 0) or 0)
        if pid:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"burstd.providers.local.preemption" in cmdline and b"chaos" in cmdline:
                    os.kill(pid, 15)
            except (OSError, ProcessLookupError):
                pass


class RandomPreemptions:
    """Spot reclaims at random, ``rate_per_hour`` per running VM (a Poisson process per VM).

    Call ``roll(vms)`` every cycle with the running VMs' namespaces; each is preempted with probability
    ``1 - exp(-rate * elapsed)``, elapsed being the time since the previous roll.
    """

    def __init__(self, rate_per_hour: float, *, rng: random.Random | None = None, clock=time.time):
        self.rate_per_hour = rate_per_hour
        self.rng = rng or random.Random()
        self.clock = clock
        self._last: float | None = None

    def roll(self, vms: Iterable[str]) -> list[str]:
        now = self.clock()
        last, self._last = self._last, now
        if self.rate_per_hour <= 0 or last is None or now <= last:
            return []
        p = 1.0 - math.exp(-self.rate_per_hour * (now - last) / 3600.0)
        return [vm for vm in vms if self.rng.random() < p]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burstd.providers.local.preemption")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reclaim", help="destroy a local VM at its preemption deadline")
    r.add_argument("--records-dir", required=True)
    r.add_argument("--netns", required=True)
    r.add_argument("--at", type=float, required=True, help="Unix time")
    c = sub.add_parser("chaos", help="preempt a local VM at a random time (Poisson, RATE per hour)")
    c.add_argument("--records-dir", required=True)
    c.add_argument("--netns", required=True)
    c.add_argument("--rate", type=float, required=True)
    c.add_argument("--notice", type=float, required=True)
    o = sub.add_parser("poweroff", help="a local VM shuts itself down (run from inside it: the agent's dead-man "
                       "switch)")
    o.add_argument("--records-dir", required=True)
    o.add_argument("--netns", required=True)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if a.cmd == "poweroff":
        stopped = power_off_from_inside(a.records_dir, a.netns)
        log.warning("powered off from inside netns=%s processes_stopped=%s", a.netns, stopped)
        return 0
    if a.cmd == "chaos":
        deadline = chaos(a.records_dir, a.netns, a.rate, a.notice)
        log.warning("chaos netns=%s deadline=%s", a.netns, deadline)
        return 0
    existed = reclaim_at(a.records_dir, a.netns, a.at)
    log.warning("reclaimed netns=%s existed=%s", a.netns, existed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
