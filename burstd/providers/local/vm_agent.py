"""burstd-agent inside an image VM: the image's own Python and burstd, set up the way a cloud sets one up.

    extra = start(config, vm, records_dir=records, metadata_port=1338, state_dir=imds, spawn=_spawn, env=env)

On AWS and GCP the agent is the image's (``/usr/bin/burstd-agent``), its settings arrive with the instance (user
data) and it reaches the daemon over the network. A local VM booted from an image (``vmroot``) gets the same, and
nothing of the head's files:

1. **user data**: the ``[agent]`` settings the node needs (:func:`user_data`), served by the VM's metadata endpoint
   at ``/latest/user-data`` (root only, like everything at 169.254.169.254);
2. **the link to the head**: each unix-socket daemon URL (``agent.daemon_url``, else the daemon's ``api.socket``,
   and the standbys) is relayed into the VM at ``/run/burstd-boot/daemon-N.sock`` by a host-side process in the
   VM's network namespace (:func:`link`; it dies with the VM). The relay goes to that daemon's **nodes' socket**
   (``config.agent_socket_of``), never its control socket: the relay is root on the head, and on the control
   socket the VM's root would have been the daemon's admin. There the VM's agent token is its only credential:
   the daemon mints it at launch, the boot hands it in at ``/run/burstd-boot/agent.token`` (root's, 0600), and
   the user data names it. The socket in the VM is root's (0600): the agent reaches the daemon through it, a job
   does not. An ``https://`` URL is used as it is, over the VM's network;
3. **the guest's power-off**: the agent's dead-man switch runs ``touch /run/burstd-boot/poweroff``; the link
   process sees it and powers the VM off as a hypervisor would (``preemption.power_off_from_inside``: every
   process of the VM ends, its record goes);
4. ``nsenter`` through the VM's PID 1 into its namespaces and root runs :data:`STARTER` there: it fetches the user
   data with an IMDSv2 token into ``/etc/burstd/burstd.toml`` (0600), finds the Slurm configuration configless
   slurmd cached (scontrol drains through it), and execs the image's ``burstd-agent``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
from pathlib import Path

import tomlkit

from burstd.config import agent_socket_of
from burstd.providers.local import netns as vms
from burstd.providers.local import vmroot
from burstd.providers.local.metadata import LINK_LOCAL

log = logging.getLogger("burstd.providers.local")

USER_DATA = "user-data"  # in the VM's metadata state dir: what /latest/user-data serves
POWEROFF = "poweroff"  # in <vm_dir>/boot (the VM's /run/burstd-boot): the guest asks to be powered off
IN_VM_BOOT = "/run/burstd-boot"
IMAGE_AGENT = "/usr/bin/burstd-agent"  # the recipe links the image's agent venv there (burstd.image.recipe)
CONF_WAIT_S = 120  # how long the starter waits for slurmd's cached configuration (slurmd may start late)

# Run inside the VM as root; $0 is the metadata URL, the rest the agent's extra arguments.
STARTER = r"""set -eu
md=$0
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
token=$(curl -sf --retry 20 --retry-connrefused --retry-delay 1 -X PUT \
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$md/latest/api/token")
umask 077
mkdir -p /etc/burstd
curl -sf --retry 5 --retry-connrefused -H "X-aws-ec2-metadata-token: $token" "$md/latest/user-data" \
  >/etc/burstd/burstd.toml.new
mv /etc/burstd/burstd.toml.new /etc/burstd/burstd.toml
conf= i=0
while [ -z "$conf" ] && [ "$i" -lt CONF_WAIT_TENTHS ]; do
  for d in /run/slurm/conf /var/spool/slurmd $(cat /run/burstd-boot/dirs 2>/dev/null); do
    [ -d "$d" ] && conf=$(find "$d" -path '*conf-cache/slurm.conf' 2>/dev/null | head -n 1)
    [ -n "$conf" ] && break
  done
  [ -n "$conf" ] || { sleep 0.1; i=$((i + 1)); }
done
[ -n "$conf" ] || echo "burstd-agent start: no cached slurm.conf in the VM; drains will fail" >&2
exec IMAGE_AGENT --config /etc/burstd/burstd.toml ${conf:+--slurm-conf "$conf"} "$@"
"""


def starter_script() -> str:
    return STARTER.replace("CONF_WAIT_TENTHS", str(CONF_WAIT_S * 10)).replace("IMAGE_AGENT", IMAGE_AGENT)


def daemon_urls(config) -> list[str]:
    """The daemon URLs the agent tries, in order, as the head knows them (the daemon's socket by default)."""
    first = config.agent.daemon_url or f"unix:{config.api.socket}"
    return [first, *config.agent.standby_daemon_urls]


def relays(urls: list[str]) -> dict[str, str]:
    """Socket name in the VM's /run/burstd-boot -> the nodes' socket of that daemon on the head, per unix URL."""
    return {f"daemon-{i}.sock": agent_socket_of(url.removeprefix("unix:")) for i, url in enumerate(urls)
            if url.startswith("unix:")}


def in_vm_urls(urls: list[str]) -> list[str]:
    """The same URLs as the agent in the VM reaches them: a unix socket through its relay."""
    return [f"unix:{IN_VM_BOOT}/daemon-{i}.sock" if url.startswith("unix:") else url for i, url in enumerate(urls)]


def user_data(config, node: str, metadata_port: int, token: bool = True) -> str:
    """The VM's user data: the agent's settings (TOML), nothing secret and no path of the head's. ``token``: the
    boot handed the VM its agent token (``/run/burstd-boot/agent.token``)."""
    urls = in_vm_urls(daemon_urls(config))
    agent = {
        "provider": "local", "node_name": node, "metadata_url": f"http://{LINK_LOCAL}:{metadata_port}",
        "poll_interval_s": config.agent.poll_interval_s, "signal": config.agent.signal,
        "lead_time_s": config.agent.lead_time_s, "on_rebalance": config.agent.on_rebalance,
        "daemon_url": urls[0], "standby_daemon_urls": urls[1:],
        "deadman_s": config.agent.deadman_s,
        "poweroff_command": ["touch", f"{IN_VM_BOOT}/{POWEROFF}"],
    }
    if token:
        agent["daemon_token_file"] = f"{IN_VM_BOOT}/{vmroot.AGENT_TOKEN}"
    return tomlkit.dumps({"agent": agent})


def link_argv(vm_dir: str, relay_map: dict[str, str], records_dir: str | os.PathLike, netns: str,
              python: str = sys.executable) -> list[str]:
    argv = [python, "-m", "burstd.providers.local.vm_agent", "link", "--vm-dir", vm_dir,
            "--records-dir", str(records_dir), "--netns", netns]
    for name, target in relay_map.items():
        argv += ["--relay", f"{name}={target}"]
    return argv


def start(config, vm, *, records_dir: str | os.PathLike, metadata_port: int, state_dir: Path,
          spawn, env: dict[str, str]) -> dict[str, str]:
    """Hand the VM its user data and its link to the head, and start the image's agent inside it.

    ``state_dir`` is the VM's metadata state folder (the user data goes there); ``spawn(argv, log, env)`` starts a
    detached process (``preemption._spawn``). Raises RuntimeError when the VM has no PID 1 to enter (not booted
    from an image, or already gone)."""
    vms.check_name("namespace name", vm.netns)
    init = vmroot.init_pid(vms.netns_pids(vm.netns))
    if init is None:
        raise RuntimeError(f"VM {vm.netns} has no init process to start burstd-agent in")
    urls = daemon_urls(config)
    data = Path(state_dir) / USER_DATA
    has_token = (Path(vm.vm_dir) / "boot" / vmroot.AGENT_TOKEN).is_file()
    if not has_token:
        log.warning("VM %s has no agent token: its agent cannot reach the daemon (launched without one)", vm.netns)
    data.write_text(user_data(config, vm.node_name, metadata_port, token=has_token))
    data.chmod(0o600)
    enter = ["nsenter", f"--net={vms.NETNS_DIR / vm.netns}", "--"]
    spawn(enter + link_argv(vm.vm_dir, relays(urls), records_dir, vm.netns), Path(state_dir) / "link.log", env)
    inside = ["nsenter", f"--target={init}", "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd",
              "--", "/bin/sh", "-c", starter_script(), f"http://{LINK_LOCAL}:{metadata_port}"]
    spawn(inside, Path(state_dir) / "agent.log", {"PATH": vms.SANE_PATH, "LANG": "C.UTF-8"})
    return {"agent": "image", "agent_init_pid": str(init)}


# ------------------------------------------------------------------------------------ the host side of the link


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # a half-close reaches the other side (an HTTP client may wait on it)
    except (ConnectionError, OSError):
        pass


async def _relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, target: str) -> None:
    try:
        up_r, up_w = await asyncio.open_unix_connection(target)
    except OSError as exc:
        log.warning("relay: cannot reach %s: %s", target, exc)
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
    finally:
        for w in (up_w, client_w):
            w.close()


async def serve_link(boot_dir: Path, relay_map: dict[str, str], on_poweroff, *, poll_s: float = 0.5) -> None:
    """Relay each socket of ``relay_map`` (name in ``boot_dir`` -> target socket) and return once the guest asked
    for a power-off (``<boot_dir>/poweroff``), after ``on_poweroff()`` ran."""
    servers = []
    for name, target in relay_map.items():
        path = boot_dir / name
        path.unlink(missing_ok=True)
        # bound by its name from inside boot_dir: a long host path would not fit a socket address (108 bytes)
        server = await asyncio.start_unix_server(functools.partial(_relay, target=target), path=name)
        os.chmod(path, 0o600)  # root's: the agent reaches the daemon, a job on the VM does not
        servers.append(server)
    try:
        while not (boot_dir / POWEROFF).exists():
            await asyncio.sleep(poll_s)
        await asyncio.get_running_loop().run_in_executor(None, on_poweroff)
    finally:
        for server in servers:
            server.close()


def _relay_pair(text: str) -> tuple[str, str]:
    name, sep, target = text.partition("=")
    if not sep or "/" in name or not name.endswith(".sock") or not target.startswith("/"):
        raise argparse.ArgumentTypeError(f"--relay wants NAME.sock=/path/to/socket, got {text!r}")
    return name, target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burstd.providers.local.vm_agent")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lk = sub.add_parser("link", help="an image VM's link to the head: relay the daemon's sockets, see its power-off")
    lk.add_argument("--vm-dir", required=True)
    lk.add_argument("--records-dir", required=True)
    lk.add_argument("--netns", required=True)
    lk.add_argument("--relay", type=_relay_pair, action="append", default=[])
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    vms.check_name("namespace name", a.netns)
    boot_dir = Path(a.vm_dir) / "boot"
    os.chdir(boot_dir)

    def power_off() -> None:
        from burstd.providers.local.preemption import power_off_from_inside

        stopped = power_off_from_inside(a.records_dir, a.netns)
        vmroot.remove(a.vm_dir)  # the VM's disk goes with it, as with a terminate
        log.warning("the guest powered itself off netns=%s processes_stopped=%s", a.netns, stopped)

    asyncio.run(serve_link(boot_dir, dict(a.relay), power_off))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
