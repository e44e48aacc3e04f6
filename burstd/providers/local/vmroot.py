"""A namespace VM that boots from a node image: its own mount namespace and root filesystem, none of the head's.

``VmRoot`` says what a VM boots from; :func:`boot_argv` is the command that boots it, run inside the VM's network
namespace (``netns.start_argv`` puts ``nsenter --net`` in front)::

    root = VmRoot(image="/var/lib/burstd-testbed/images/<digest>/rootfs", vm_dir="/var/lib/.../sl-cloud1.vm",
                  munge_key="/etc/munge/munge.key", users=("burstuser",))

The boot, as root, in a fresh mount, UTS and PID namespace (so nothing it mounts is seen by the host, and nothing
in the VM sees or signals a process of the head's: its /proc is its own):

1. an overlayfs over the image (the image is the read-only lower layer, shared by every VM; each VM writes into
   ``<vm_dir>/upper``, emptied at every boot, so a VM starts from the image as built);
2. a /proc of the VM's own PID namespace, /sys (slurmd needs the cgroup filesystem) and /dev from the host, a
   tmpfs /run, and a scratch disk of its own (``<vm_dir>/scratch`` at ``/scratch``). No /home, no project
   folder, no host binary, no head process is visible;
3. what arrives at boot, never baked into the image: the cluster's munge key (copied from ``munge_key``, as a
   cloud node fetches it from the secret store), the job users' passwd and group lines (a site's directory
   service stands in for them), the parity reference and its settings;
4. ``chroot`` into the image: munged starts, the folders slurmd's configuration names are made, the parity gate
   runs (the image's own ``burstctl image check`` against the on-prem reference: on a difference slurmd never
   starts, the boot exits 3 and ``<vm_dir>/boot/gate.out`` names each difference), then data staging
   (``/usr/lib/burstd/stage-in.d/*``, executables in the image, run in name order: where issue 24's staging
   plugs in) and finally slurmd, from the image;
5. the boot's first process, PID 1 of the VM, becomes the VM's init (the image's python3, reaping the orphans a
   PID 1 inherits) and lives as long as the VM. The command that boots returns once ``<vm_dir>/boot/booted``
   says the VM is up, or with the boot's exit status (``GATE_REFUSED``) when it ended before that.

``<vm_dir>/boot`` is the VM's ``/run/burstd-boot``: the only folder both sides see (the gate's answer comes back
through it; ``vm_agent`` relays the daemon's socket into it and watches it for the guest's power-off).
:func:`init_pid` finds the VM's PID 1 from the host, to start a process inside the VM (``nsenter --target``). Every path is checked against a narrow character set first: they end up in mount options, where a
comma or a colon would change their meaning.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

GATE_OUT = "gate.out"  # under <vm_dir>/boot: the parity gate's differences, when it refused the image
GATE_REFUSED = 3  # the boot's exit status when the gate refused
BOOTED = "booted"  # under <vm_dir>/boot: made once slurmd is started (or scheduled); the VM is up
BOOT_EXIT = "exit"  # under <vm_dir>/boot: the boot's exit status, when it ended before the VM was up
# the node's agent token: the provider puts it in <vm_dir> before the boot, the boot moves it into <vm_dir>/boot
# (the VM's /run/burstd-boot, root's, 0600) before anything in the VM starts: it arrives with the VM, like the key
AGENT_TOKEN = "agent.token"
BOOT_WAIT_S = 180  # the longest a boot may take to answer (the gate fingerprints the image: seconds)
GATE_OUT_MAX = 4000  # characters of the gate's answer read back (a lease reason is bounded further)
STAGE_IN_DIR = "/usr/lib/burstd/stage-in.d"  # in the image: data staging's hooks, run before slurmd starts
IMAGE_AGENT_CLI = "/opt/burstd/agent/bin/burstctl"  # burstd in the image (burstd.image.recipe.AGENT_VENV)

_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]{0,254}$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class VmRootError(ValueError):
    """A VmRoot setting that cannot be used; the message names it."""


def _path(what: str, value: str) -> str:
    if not isinstance(value, str) or not _PATH_RE.fullmatch(value) or "/../" in f"{value}/":
        raise VmRootError(f"invalid {what} {value!r}: an absolute path of letters, digits and _ . / - only")
    return value


@dataclass(frozen=True)
class VmRoot:
    image: str  # the image's root filesystem (``image build --provider local --out DIR`` made DIR/rootfs)
    vm_dir: str  # this VM's own folder on the host: upper, work, root, scratch, boot
    munge_key: str = "/etc/munge/munge.key"  # the cluster's key on the head, copied in at each boot
    users: tuple[str, ...] = ()  # job users whose passwd/group lines the VM gets (from the head's getent)
    make_dirs: tuple[str, ...] = ()  # folders slurm.conf names for slurmd (spool, log, pid), made in the VM
    parity_reference: str | None = None  # the on-prem fingerprint (JSON); None: no gate
    parity_spec: str | None = None  # a TOML file with [parity] (allow, job_python, checks) for the gate

    def __post_init__(self) -> None:
        _path("image", self.image)
        _path("vm_dir", self.vm_dir)
        _path("munge_key", self.munge_key)
        for d in self.make_dirs:
            _path("make_dirs entry", d)
        for name in ("parity_reference", "parity_spec"):
            if getattr(self, name) is not None:
                _path(name, getattr(self, name))
        if (self.parity_reference is None) != (self.parity_spec is None):
            raise VmRootError("parity_reference and parity_spec go together (the gate needs both)")
        for user in self.users:
            if not isinstance(user, str) or not _USER_RE.fullmatch(user):
                raise VmRootError(f"invalid user name {user!r}")
        if Path(self.vm_dir).resolve() in (Path("/"), Path(self.image).resolve()):
            raise VmRootError(f"vm_dir {self.vm_dir!r} must be a folder of its own")

    @property
    def boot_dir(self) -> Path:
        return Path(self.vm_dir) / "boot"


# Host side, in the VM's network namespace: start the VM (detached: its PID 1 lives as long as the VM) and wait
# for its verdict. "$0" is the VM's folder; the rest is unshare's argv. The exit status lands by rename: the loop
# must never read a file the shell has created but not yet written (an empty status reads as exit 2).
_START = r"""vm=$0
rm -rf "$vm/upper" "$vm/work" "$vm/boot"
mkdir -p "$vm/upper" "$vm/work" "$vm/root" "$vm/scratch" "$vm/boot"
[ ! -e "$vm/AGENT_TOKEN" ] || mv "$vm/AGENT_TOKEN" "$vm/boot/AGENT_TOKEN"
setsid -f sh -c 'unshare "$@"; echo "$?" >"$0/boot/BOOT_EXIT.part"; mv "$0/boot/BOOT_EXIT.part" "$0/boot/BOOT_EXIT"' "$vm" "$@"
i=0
while [ "$i" -lt BOOT_WAIT_TENTHS ]; do
  [ -e "$vm/boot/BOOTED" ] && exit 0
  [ -e "$vm/boot/BOOT_EXIT" ] && exit "$(cat "$vm/boot/BOOT_EXIT")"
  sleep 0.1; i=$((i + 1))
done
echo "boot: no answer from the VM within BOOT_WAIT_S s" >&2
exit 1
"""

# Host side, in the VM's new mount and PID namespaces (PID 1 there): build the root, hand in what arrives at boot,
# chroot.
_BOOT = r"""set -eu
img=$1 vm=$2 host=$3 key=$4 users=$5 dirs=$6 ref=$7 pspec=$8 delay=$9; shift 9
hostname "$host"
[ -x "$img/usr/sbin/slurmd" ] || { echo "boot: $img is not a node image (no usr/sbin/slurmd)" >&2; exit 1; }
mount -t overlay overlay -o "lowerdir=$img,upperdir=$vm/upper,workdir=$vm/work" "$vm/root"
r=$vm/root
mount -t proc -o nosuid,nodev,noexec proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=0755 tmpfs "$r/run"
mkdir -p "$r/run/burstd-boot" "$r/scratch"
mount --bind "$vm/boot" "$r/run/burstd-boot"
mount --bind "$vm/scratch" "$r/scratch"
chmod 1777 "$vm/scratch"
install -m 0400 "$key" "$r/etc/munge/munge.key"
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$host" >"$r/etc/hosts"
for u in $(printf '%s' "$users" | tr , ' '); do
  line=$(getent passwd "$u")
  grep -q "^$u:" "$r/etc/passwd" || printf '%s\n' "$line" >>"$r/etc/passwd"
  g=$(getent group "$(printf '%s' "$line" | cut -d: -f4)" | cut -d: -f1-3)
  grep -q "^${g%%:*}:" "$r/etc/group" || printf '%s:\n' "$g" >>"$r/etc/group"
done
printf '%s\n' "$dirs" | tr : '\n' >"$vm/boot/dirs"
if [ -n "$ref" ]; then cp "$ref" "$vm/boot/parity-reference.json"; cp "$pspec" "$vm/boot/parity.toml"; fi
exec chroot "$r" /bin/sh -c "$INNER" "$delay" "$@"
"""

# Inside the image: munge, the gate, staging, then slurmd (the arguments; $0 is the delay before slurmd).
_INNER = r"""set -eu
delay=$0
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
chown munge:munge /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
runuser -u munge -- /usr/sbin/munged
while read -r d; do [ -z "$d" ] || mkdir -p "$d"; done </run/burstd-boot/dirs
if [ -e /run/burstd-boot/parity-reference.json ]; then
  if ! AGENT_CLI image check --reference /run/burstd-boot/parity-reference.json \
      --spec /run/burstd-boot/parity.toml >/run/burstd-boot/GATE_OUT 2>&1; then
    echo "parity gate: the image differs from on-prem, slurmd not started:" >&2
    cat /run/burstd-boot/GATE_OUT >&2
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    exit GATE_REFUSED
  fi
fi
if [ -d STAGE_IN_DIR ]; then
  for hook in STAGE_IN_DIR/*; do [ -x "$hook" ] && "$hook"; done
fi
if [ "$delay" != 0 ]; then  # a slow cloud boot: slurmd later, the gate's answer now
  setsid -f sh -c 'sleep "$0" && exec "$@"' "$delay" "$@" </dev/null >/dev/null 2>&1
else
  "$@"
fi
: >/run/burstd-boot/BOOTED
exec python3 -c VM_INIT
"""

# The VM's PID 1 for its whole life: orphans are reparented to it, and a PID 1 that does not reap them fills the
# VM with zombies. Signals from inside the VM cannot stop it (PID 1 gets none it does not handle); the host's
# SIGKILL (a terminate, a power-off) ends it and, with it, every process of the VM. One line: hook scripts indent
# what they embed (burstd.testbed.render), and an indented Python block would not parse.
_VM_INIT = ('exec("import os, time\\nwhile True:\\n try:\\n  os.wait()\\n except ChildProcessError:\\n'
            '  time.sleep(1)\\n")')


def inner_script() -> str:
    return (_INNER.replace("AGENT_CLI", IMAGE_AGENT_CLI).replace("GATE_OUT", GATE_OUT)
            .replace("GATE_REFUSED", str(GATE_REFUSED)).replace("STAGE_IN_DIR", STAGE_IN_DIR)
            .replace("BOOTED", BOOTED).replace("VM_INIT", shlex.quote(_VM_INIT)))


def hand_in_token(vm_dir: str, token: str) -> None:
    """Put the node's agent token where the boot takes it from (``<vm_dir>/agent.token``, root's, 0600; the boot
    moves it into the VM's /run/burstd-boot before anything there starts)."""
    folder = Path(vm_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{AGENT_TOKEN}.new"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    os.replace(tmp, folder / AGENT_TOKEN)


def start_script() -> str:
    return (_START.replace("BOOT_WAIT_TENTHS", str(BOOT_WAIT_S * 10)).replace("BOOT_WAIT_S", str(BOOT_WAIT_S))
            .replace("BOOT_EXIT", BOOT_EXIT).replace("BOOTED", BOOTED).replace("AGENT_TOKEN", AGENT_TOKEN))


def boot_argv(root: VmRoot, hostname: str, command: list[str], delay_s: float = 0.0) -> list[str]:
    """Boot ``root`` under ``hostname`` and run ``command`` (slurmd's argv, paths inside the image) in it,
    ``delay_s`` after the gate passed (the boot returns then; the command's start is left running).

    Runs inside the VM's network namespace; the new mount namespace ends with the VM's last process, taking
    the overlay and every bind mount with it (nothing to unmount on the host), and the PID namespace with its
    PID 1 (the kernel kills every process left in it)."""
    script = f"INNER={shlex.quote(inner_script())}\n{_BOOT}"
    return ["sh", "-c", start_script(), root.vm_dir,
            "--mount", "--uts", "--pid", "--fork", "--propagation", "private", "--", "sh", "-c", script, "boot",
            root.image, root.vm_dir, hostname, root.munge_key, ",".join(root.users), ":".join(root.make_dirs),
            root.parity_reference or "", root.parity_spec or "", "0" if delay_s <= 0 else f"{delay_s:.3f}",
            *command]


def init_pid(pids: list[int]) -> int | None:
    """Of ``pids`` (a VM's processes, host pids), the VM's PID 1, seen from the host; None when it has none (a VM
    that is not booted, or one that shares the head's PID namespace)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                ns_pids = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if len(ns_pids) >= 2 and ns_pids[-1] == "1":
            return pid
    return None


def gate_refusal(vm_dir: str | Path) -> str | None:
    """The parity gate's differences from the VM's last boot, one per line; None when it did not refuse.

    Written inside the VM, so read as outside input: at most ``GATE_OUT_MAX`` characters, control characters
    (but newlines) replaced, before any of it reaches a lease's reason or a log."""
    try:
        with open(Path(vm_dir) / "boot" / GATE_OUT, "rb") as fh:
            raw = fh.read(GATE_OUT_MAX)
    except OSError:
        return None
    text = "".join(c if c.isprintable() or c == "\n" else "?" for c in raw.decode("utf-8", "replace")).strip()
    return text or None


def remove(vm_dir: str | Path) -> None:
    """The VM's disk (its overlay's upper layer, scratch, boot folder) goes with the VM. Only called once every
    process of the VM is gone: its mount namespace, the only place the overlay was mounted, is gone with them."""
    shutil.rmtree(vm_dir, ignore_errors=True)
