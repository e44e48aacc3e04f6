"""Network-namespace "VMs": the primitive behind the test bed's nodes and the local provider.

A VM is a network namespace with one veth leg on a host bridge, its own address, its own hostname (a UTS
namespace made with ``unshare --uts``) and a real ``slurmd`` started under the node's Slurm name::

    vm = VmSpec(netns="sl-cloud1", node_name="cloud1", address="10.77.0.101/24", bridge="br-slurm",
                conf_server="10.77.0.1:6817", tags={"burstd:lease": "L1"})
    rec = create(vm, records_dir=Path("/var/lib/burstd/local/pool"))
    destroy(rec.netns, records_dir=...)

Why it is done this way (see shared TESTBED.md): ``ip netns exec`` remounts /sys and slurmd then cannot find
its cgroup filesystem, so processes enter the namespace with ``nsenter --net=/run/netns/NS``; Debian's slurmd
is not built for several slurmds per host, so each node needs its own address; and ``slurmd -b`` makes a
namespace VM report a fresh boot (every namespace shares the host's /proc/uptime).

Each VM has a JSON record ``<records_dir>/<netns>.json`` written *before* anything is created, so a
process that crashes half-way (or a restarted daemon) finds what exists: :func:`list_vms` reads the records
and checks each one against the live namespaces. Destroying a VM kills every process whose network namespace
is the VM's (slurmd, slurmstepd, the jobs, anything an agent started inside), then deletes the namespace and
the host veth.

Everything here runs ``ip``/``nsenter`` with argument lists; names are validated first.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from burstd.providers.local import vmroot
from burstd.secure_files import private_lock

NETNS_DIR = Path("/run/netns")
SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IFNAMSIZ = 15  # usable characters in a Linux interface name
# the records lock is held for one launch (namespace, slurmd, the VM's services: seconds) or one teardown
RECORDS_LOCK_TIMEOUT_S = 60.0

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
_IFNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")


class NetnsError(RuntimeError):
    """A namespace VM could not be created or destroyed; the message names the VM and the failing step."""


class ParityRefused(NetnsError):
    """An image VM's parity gate found the image unlike on-prem: slurmd never started; the message names each
    difference, ``differences`` lists them."""

    def __init__(self, message: str, differences: list[str]):
        super().__init__(message)
        self.differences = differences


def check_name(what: str, value: str, pattern: re.Pattern[str] = _NAME_RE) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"invalid {what} {value!r}: must match {pattern.pattern}")
    return value


def veth_name(netns: str) -> str:
    """The host-side veth of a namespace: short and unique across beds (IFNAMSIZ is 15 characters)."""
    return "bv" + hashlib.sha1(netns.encode()).hexdigest()[:12]


@dataclass
class VmSpec:
    """What to create. ``address`` is an interface address with prefix, e.g. ``10.77.0.101/24``."""

    netns: str
    node_name: str
    address: str
    bridge: str
    conf_server: str | None = None  # "10.77.0.1:6817": configless slurmd; None = slurmd reads $SLURM_CONF
    hostname: str | None = None  # default: node_name
    slurmd: str = "/usr/sbin/slurmd"
    slurmd_args: tuple[str, ...] = ("-b",)  # -b: report a fresh boot (needed for namespace VMs)
    slurm_conf: str | None = None  # SLURM_CONF for slurmd when conf_server is None
    boot_delay_s: float = 0.0  # slurmd starts this long after the network is up
    instance_id: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    # boot from a node image in a mount namespace of its own (vmroot); None: slurmd shares the host's filesystem
    root: vmroot.VmRoot | None = None
    # the node's agent token, handed in at the boot of an image VM (vmroot.AGENT_TOKEN); never in a repr
    agent_token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        check_name("namespace name", self.netns)
        check_name("node name", self.node_name, _HOST_RE)
        check_name("hostname", self.host, _HOST_RE)
        check_name("bridge name", self.bridge, _IFNAME_RE)
        ipaddress.ip_interface(self.address)  # raises ValueError naming the address
        if self.conf_server is not None and not re.fullmatch(r"[A-Za-z0-9.:\[\]-]+", self.conf_server):
            raise ValueError(f"invalid conf_server {self.conf_server!r}")
        if self.boot_delay_s < 0:
            raise ValueError("boot_delay_s must be >= 0")
        self.instance_id = self.instance_id or f"ns-{self.netns}"

    @property
    def host(self) -> str:
        return self.hostname or self.node_name

    @property
    def veth(self) -> str:
        return veth_name(self.netns)


@dataclass
class VmRecord:
    """A VM as stored on disk; ``alive`` is filled from the live system by :func:`list_vms`."""

    netns: str
    node_name: str
    hostname: str
    address: str
    bridge: str
    veth: str
    instance_id: str
    state: str = "launching"  # launching | booting | running | preempted
    created_at: float = 0.0
    boot_at: float = 0.0  # when slurmd was (or will be) started
    tags: dict[str, str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # for hooks (e.g. a metadata endpoint's address)
    services_up: bool = False  # every hook's vm_started returned (the provider's last launch step)
    vm_dir: str = ""  # a VM booted from an image: its disk on the host (vmroot), removed with the VM
    alive: bool = False

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("alive")
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_file(cls, path: Path) -> VmRecord:
        data = json.loads(path.read_text())
        known = {f for f in cls.__dataclass_fields__ if f != "alive"}
        rec = cls(**{k: v for k, v in data.items() if k in known})
        if not rec.created_at:
            rec.created_at = path.stat().st_mtime
        return rec


# --------------------------------------------------------------------------------------------- commands


def enter_argv(netns: str, hostname: str | None = None) -> list[str]:
    """Argv prefix that runs a command inside ``netns`` (and, with ``hostname``, in its own UTS namespace).

    ``nsenter --net`` keeps the mount namespace, so /sys/fs/cgroup stays visible (``ip netns exec`` would
    hide it and slurmd would die).
    """
    check_name("namespace name", netns)
    argv = ["nsenter", f"--net={NETNS_DIR / netns}"]
    if hostname is not None:
        check_name("hostname", hostname, _HOST_RE)
        argv += ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', hostname]
    return argv


def network_commands(spec: VmSpec) -> list[list[str]]:
    """The ``ip`` commands that build the VM's network, in order."""
    ns, veth = spec.netns, spec.veth
    return [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
        ["ip", "link", "set", veth, "master", spec.bridge, "up"],
        ["ip", "-n", ns, "addr", "add", spec.address, "dev", "eth0"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        ["ip", "-n", ns, "link", "set", "eth0", "up"],
    ]


def slurmd_argv(spec: VmSpec) -> list[str]:
    argv = [spec.slurmd, *spec.slurmd_args, "-N", spec.node_name]
    if spec.conf_server:
        argv += ["--conf-server", spec.conf_server]
    return argv


def start_argv(spec: VmSpec) -> list[str]:
    """The command that starts slurmd inside the VM (slurmd daemonizes itself: fork + setsid); from the VM's
    image when it has one."""
    if spec.root is not None:
        return enter_argv(spec.netns) + vmroot.boot_argv(spec.root, spec.host, slurmd_argv(spec),
                                                         spec.boot_delay_s)
    return enter_argv(spec.netns, spec.host) + slurmd_argv(spec)


def starts_delayed(spec: VmSpec) -> bool:
    """slurmd starts ``boot_delay_s`` after the network, by :func:`delayed_start_argv`; an image VM boots (and
    passes its gate, or not) at once and delays only slurmd, inside :func:`start_argv`."""
    return spec.boot_delay_s > 0 and spec.root is None


def delayed_start_argv(spec: VmSpec) -> list[str]:
    """Start slurmd after ``boot_delay_s`` without blocking: a detached sleeper *inside* the namespace, so
    that destroying the VM during its "boot" also kills the sleeper."""
    inner = f"sleep {spec.boot_delay_s:.3f} && hostname \"$0\" && exec \"$@\""
    return ["setsid", "-f", *enter_argv(spec.netns), "unshare", "--uts", "--", "sh", "-c", inner, spec.host,
            *slurmd_argv(spec)]


def slurmd_env(spec: VmSpec) -> dict[str, str]:
    env = {"PATH": SANE_PATH, "LANG": "C"}
    if spec.conf_server is None and spec.slurm_conf:
        env["SLURM_CONF"] = spec.slurm_conf
    return env


def shell_create(spec: VmSpec, console_log: str) -> str:
    """The same creation as :func:`create`, as POSIX shell lines (for hook scripts that need no Python)."""
    lines = [shlex.join(c) for c in network_commands(spec)]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in slurmd_env(spec).items())
    start = delayed_start_argv(spec) if starts_delayed(spec) else start_argv(spec)
    lines.append(f"env -i {env} {shlex.join(start)} >>{shlex.quote(console_log)} 2>&1 </dev/null")
    return "\n".join(lines)


def shell_destroy(spec: VmSpec) -> str:
    """Kill everything in the namespace, delete it and its veth (and an image VM's disk); shell lines, errors
    ignored."""
    ns = shlex.quote(spec.netns)
    lines = [
        f"pids=$(ip netns pids {ns} 2>/dev/null) || true",
        "if [ -n \"$pids\" ]; then kill -9 $pids 2>/dev/null || true; fi",
        f"ip netns del {ns} 2>/dev/null || true",
        f"ip link del {shlex.quote(spec.veth)} 2>/dev/null || true",
    ]
    if spec.root is not None:
        lines.append(f"sleep 0.2; rm -rf {shlex.quote(spec.root.vm_dir)}")
    return "\n".join(lines)


def _run(argv: list[str], what: str, check: bool = True, env: dict[str, str] | None = None,
         stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    stderr = subprocess.PIPE if stdout is subprocess.PIPE else stdout
    proc = subprocess.run(argv, stdout=stdout, stderr=stderr,
                          stdin=subprocess.DEVNULL, text=True, env=env or {"PATH": SANE_PATH, "LANG": "C"})
    if check and proc.returncode != 0:
        err = (proc.stderr or "").strip() if isinstance(proc.stderr, str) else ""
        raise NetnsError(f"{what}: `{shlex.join(argv)}` failed (exit {proc.returncode}): {err}")
    return proc


# ------------------------------------------------------------------------------------------- live system


def list_netns() -> set[str]:
    """Names of the existing named network namespaces."""
    try:
        return {p.name for p in NETNS_DIR.iterdir()}
    except FileNotFoundError:
        return set()


def netns_exists(netns: str) -> bool:
    return (NETNS_DIR / netns).exists()


def pids_by_netns() -> dict[str, list[int]]:
    """One pass over /proc: every process whose network namespace is a named one, grouped by name."""
    inode_to_name: dict[int, str] = {}
    for name in list_netns():
        try:
            inode_to_name[os.stat(NETNS_DIR / name).st_ino] = name
        except OSError:
            continue
    out: dict[str, list[int]] = {}
    if not inode_to_name:
        return out
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ino = os.stat(f"/proc/{entry.name}/ns/net").st_ino
        except OSError:
            continue
        netns = inode_to_name.get(ino)
        if netns is not None:
            out.setdefault(netns, []).append(int(entry.name))
    return out


def netns_pids(netns: str) -> list[int]:
    return pids_by_netns().get(netns, [])


def _wait_for_pids(netns: str, timeout_s: float) -> list[int]:
    """The processes in ``netns`` once there is at least one, or [] after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (pids := netns_pids(netns)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids


def kill_all(netns: str, grace_s: float = 0.5, spare: int | None = None) -> int:
    """SIGTERM then SIGKILL every process inside ``netns`` (but ``spare``: the caller shutting its own VM down);
    returns how many there were.

    ``grace_s=0`` is a power-off: SIGKILL to every process at once, no SIGTERM, so nothing in the VM gets a
    chance to checkpoint (what a spot reclaim without notice is; a SIGTERM grace would hand out free saves)."""
    def inside() -> list[int]:
        return [p for p in netns_pids(netns) if p != spare]

    pids = inside()
    if not pids:
        return 0
    steps = ((signal.SIGKILL, 3.0),) if grace_s <= 0 else ((signal.SIGTERM, grace_s), (signal.SIGKILL, 3.0))
    for sig, wait in steps:
        # oldest first: a supervisor (slurmd, slurmstepd) dies before the job it watches, so on a power-off
        # nothing is left to report the job's end to slurmctld, as on a VM whose power was cut
        for pid in sorted(pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            left = inside()
            if not left:
                return len(pids)
            time.sleep(0.05)
        pids = inside()
        if not pids:
            break
    return len(pids)


def netns_on_bridge(bridge: str) -> set[str]:
    """Namespaces whose veth peer is enslaved to ``bridge`` (found from the system, not from records)."""
    check_name("bridge name", bridge, _IFNAME_RE)
    proc = _run(["ip", "-j", "link", "show", "master", bridge], "list bridge ports", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return set()
    ids = {link.get("link_netnsid") for link in json.loads(proc.stdout)} - {None}
    if not ids:
        return set()
    ns_proc = _run(["ip", "-j", "netns", "list"], "list namespaces", check=False)
    names = json.loads(ns_proc.stdout) if ns_proc.stdout.strip() else []
    return {n["name"] for n in names if n.get("id") in ids}


def bridge_ports(bridge: str) -> list[str]:
    proc = _run(["ip", "-j", "link", "show", "master", bridge], "list bridge ports", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    return [link["ifname"] for link in json.loads(proc.stdout)]


def link_exists(ifname: str) -> bool:
    return Path("/sys/class/net", ifname).exists()


def ensure_bridge(bridge: str, address: str) -> None:
    """Create ``bridge`` with ``address`` (e.g. 10.77.0.1/24) and bring it up; idempotent."""
    check_name("bridge name", bridge, _IFNAME_RE)
    ipaddress.ip_interface(address)
    if not link_exists(bridge):
        _run(["ip", "link", "add", bridge, "type", "bridge"], f"create bridge {bridge}")
    proc = _run(["ip", "-j", "addr", "show", "dev", bridge], f"read bridge {bridge}")
    have = {f"{a['local']}/{a['prefixlen']}" for link in json.loads(proc.stdout or "[]")
            for a in link.get("addr_info", [])}
    if address not in have:
        _run(["ip", "addr", "add", address, "dev", bridge], f"address bridge {bridge}")
    _run(["ip", "link", "set", bridge, "up"], f"bring up bridge {bridge}")


def delete_bridge(bridge: str) -> None:
    if link_exists(bridge):
        _run(["ip", "link", "del", bridge], f"delete bridge {bridge}", check=False)


# ------------------------------------------------------------------------------------------- records


@contextmanager
def records_lock(records_dir: str | os.PathLike, timeout_s: float = RECORDS_LOCK_TIMEOUT_S) -> Iterator[None]:
    """The one lock over a records dir: one launch, terminate, preemption or power-off at a time, across
    processes (daemon, hooks, burstctl, reclaimers). ``<records_dir>/.lock`` is 0600 and ours (another user
    could hold a readable one for ever) and the wait is bounded: ``secure_files.LockTimeout`` past it."""
    records_dir = Path(records_dir)
    records_dir.mkdir(parents=True, exist_ok=True)
    with private_lock(records_dir / ".lock", timeout_s=timeout_s):
        yield


def _record_path(records_dir: Path, netns: str) -> Path:
    return Path(records_dir) / f"{check_name('namespace name', netns)}.json"


def write_record(records_dir: Path, rec: VmRecord) -> None:
    path = _record_path(records_dir, rec.netns)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w") as fh:
        fh.write(rec.to_json())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_record(records_dir: Path, netns: str) -> VmRecord | None:
    path = _record_path(records_dir, netns)
    try:
        rec = VmRecord.from_file(path)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise NetnsError(f"unreadable VM record {path}: {exc}") from None
    rec.alive = netns_exists(netns)
    return rec


def remove_record(records_dir: Path, netns: str) -> None:
    try:
        _record_path(records_dir, netns).unlink()
    except FileNotFoundError:
        pass


def list_vms(records_dir: Path) -> list[VmRecord]:
    """Every recorded VM, with ``alive`` set from the live namespaces. Sorted by namespace name."""
    out: list[VmRecord] = []
    live = list_netns()
    d = Path(records_dir)
    if not d.is_dir():
        return out
    for path in sorted(d.glob("*.json")):
        try:
            rec = VmRecord.from_file(path)
        except (ValueError, TypeError, OSError):
            continue  # a torn or foreign file: never crash a listing over it
        rec.alive = rec.netns in live
        out.append(rec)
    return out


# ----------------------------------------------------------------------------------------- create / destroy


def create(spec: VmSpec, records_dir: Path, console_dir: Path | None = None) -> VmRecord:
    """Create the VM described by ``spec`` and start its slurmd; idempotent.

    A VM whose record says it finished booting and whose namespace exists is returned as is. A half-made one
    (record written, crash before the end) is torn down and made again, unless the crash came after the last
    step, slurmd's start: a namespace with processes in it is a made VM (Slurm may already run a job on it),
    whose record is finished instead.
    """
    records_dir = Path(records_dir)
    existing = read_record(records_dir, spec.netns)
    if existing is not None and existing.alive and existing.state in ("booting", "running"):
        return existing
    if (existing is not None and existing.alive and existing.state == "launching"
            and existing.instance_id == spec.instance_id and netns_pids(spec.netns)):
        existing.state = "booting" if spec.boot_delay_s > 0 else "running"
        write_record(records_dir, existing)
        return existing
    now = time.time()
    rec = VmRecord(
        netns=spec.netns, node_name=spec.node_name, hostname=spec.host, address=spec.address,
        bridge=spec.bridge, veth=spec.veth, instance_id=spec.instance_id, state="launching",
        created_at=existing.created_at if existing else now, boot_at=now + spec.boot_delay_s,
        tags=dict(spec.tags), extra=dict(existing.extra) if existing else {},
        vm_dir=spec.root.vm_dir if spec.root is not None else "",
    )
    write_record(records_dir, rec)  # durable first: a crash from here on leaves a findable trace
    teardown(spec.netns, spec.veth, rec.vm_dir)
    if spec.root is not None and spec.agent_token:
        vmroot.hand_in_token(spec.root.vm_dir, spec.agent_token)  # the boot moves it into the VM
    for argv in network_commands(spec):
        try:
            _run(argv, f"create VM {spec.netns}")
        except NetnsError:
            teardown(spec.netns, spec.veth, rec.vm_dir)
            raise
    console = Path(console_dir or records_dir) / f"{spec.netns}.console.log"
    with open(console, "ab") as log:
        if starts_delayed(spec):
            _run(delayed_start_argv(spec), f"start slurmd in {spec.netns}", env=slurmd_env(spec), stdout=log)
            # setsid -f returns before its child has entered the namespace: wait until it has, so that the
            # VM's "boot" is visibly under way (and killed by a destroy) once create returns
            _wait_for_pids(spec.netns, 5.0)
            rec.state = "booting"
        else:
            proc = _run(start_argv(spec), f"start slurmd in {spec.netns}", check=False, env=slurmd_env(spec),
                        stdout=log)
            # slurmd forks twice to daemonize; on a loaded host its daemon can die at once (e.g. no config
            # from the controller). A VM reported running must have a slurmd in it: otherwise the launch
            # failed, visibly, and the caller retries it
            if proc.returncode != 0 or not _wait_for_pids(spec.netns, 5.0):
                refusal = vmroot.gate_refusal(rec.vm_dir) if rec.vm_dir else None
                teardown(spec.netns, spec.veth, rec.vm_dir, power_off=True)
                if refusal is not None and proc.returncode == vmroot.GATE_REFUSED:
                    image = spec.root.image if spec.root else ""
                    raise ParityRefused(f"{spec.netns}: the parity gate refused the image {image}: "
                                        + "; ".join(refusal.splitlines()), refusal.splitlines())
                raise NetnsError(f"start slurmd in {spec.netns}: exit {proc.returncode}, "
                                 f"no process left in the VM; see {console}")
            rec.state = "booting" if spec.boot_delay_s > 0 else "running"
    write_record(records_dir, rec)
    rec.alive = True
    return rec


def teardown(netns: str, veth: str | None = None, vm_dir: str = "", *, power_off: bool = False) -> bool:
    """Kill everything in ``netns`` (``power_off``: SIGKILL at once, no grace) and delete it and its host
    veth, and an image VM's disk (``vm_dir``). Returns whether anything existed."""
    veth = veth or veth_name(netns)
    existed = netns_exists(netns)
    if existed:
        kill_all(netns, grace_s=0.0) if power_off else kill_all(netns)
        _run(["ip", "netns", "del", netns], f"delete namespace {netns}", check=False)
    if vm_dir:
        vmroot.remove(vm_dir)
    if link_exists(veth):
        existed = True
        _run(["ip", "link", "del", veth], f"delete veth {veth}", check=False)
    return existed


def destroy(netns: str, records_dir: Path | None = None, keep_record_as: str | None = None, *,
            power_off: bool = False) -> bool:
    """Tear the VM down; drop its record (or keep it with state ``keep_record_as``, e.g. "preempted").
    ``power_off``: every process SIGKILLed at once, as when a cloud reclaims a spot VM."""
    rec = read_record(records_dir, netns) if records_dir else None
    existed = teardown(netns, rec.veth if rec else None, rec.vm_dir if rec else "", power_off=power_off)
    if records_dir is not None:
        if keep_record_as and rec is not None:
            rec.state = keep_record_as
            write_record(records_dir, rec)
        else:
            remove_record(records_dir, netns)
    return existed
