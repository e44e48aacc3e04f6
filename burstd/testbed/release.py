"""Which Slurm a bed runs: the host's packages (22.05 on Debian 12), or 24.11 / 26.05 from a Debian trixie / sid
chroot that the bed builds with debootstrap from Debian's archive.

A chroot is built once per machine under ``/var/lib/burstd-testbed/chroots/<suite>`` (shared by every bed of
that release; rebuilt only when missing) and never holds a mount: every command a chroot bed runs goes through
``<state>/bin/enter``, which makes a private mount namespace, binds /proc, /sys, /dev and the bed's state dir
into the chroot, and ``chroot``s. Its daemons (slurmctld, slurmdbd, slurmrestd, munged, the VMs' slurmds) keep
that namespace for their lifetime, so nothing is left mounted when they exit. ``<state>/bin/<command>`` wraps
each Slurm command, so ``PATH=<state>/bin:...`` (the bed's env, its hooks, burstd's ``slurm.bin_dir``) talks
to the chroot's Slurm as a site's own commands would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from burstd.image import debian
from burstd.image.debian import apt_env
from burstd.providers.local import netns
from burstd.testbed.config import STATE_ROOT
from burstd.testbed.host import TEST_USERS, BedError, _sh
from burstd.testbed.render import CHROOT_MARK, CHROOT_RELEASES

CHROOT_ROOT = STATE_ROOT / "chroots"
CHROOT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmrestd", "slurmdbd", "slurm-wlm-basic-plugins",
                   "slurm-wlm-jwt-plugin", "munge", "libpmix2", "procps", "util-linux")
# Commands wrapped in <state>/bin (path inside the chroot).
COMMANDS = {name: f"/usr/bin/{name}" for name in (
    "squeue", "sinfo", "scontrol", "scancel", "sbatch", "srun", "salloc", "sacct", "sacctmgr", "sdiag", "sprio",
    "sshare", "sreport", "munge", "unmunge")}
COMMANDS.update({name: f"/usr/sbin/{name}" for name in ("slurmctld", "slurmd", "slurmdbd", "slurmrestd", "munged")})


def chroot_path(release: str) -> Path:
    return CHROOT_ROOT / CHROOT_RELEASES[release]


def is_built(release: str) -> bool:
    """The release's chroot is complete (its mark is written last, before the rename into place)."""
    return (chroot_path(release) / CHROOT_MARK.lstrip("/")).exists()


def ensure_chroot(release: str, log: Path | None = None) -> Path:
    """The chroot for ``release``, built if missing (a few minutes: debootstrap, then apt-get inside).

    Built into ``<suite>.partial`` and renamed when complete, so an interrupted build is redone, never used."""
    root = chroot_path(release)
    if is_built(release):
        return root
    if shutil.which("debootstrap", path=netns.SANE_PATH) is None:
        raise BedError("debootstrap is missing; run: bash scripts/install-deps.sh")
    suite = CHROOT_RELEASES[release]
    partial = root.with_name(root.name + ".partial")
    CHROOT_ROOT.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") if log else nullcontext(subprocess.DEVNULL) as out:
        debootstrap(partial, suite, out)
        # sid's Release file can be past its Valid-Until on a mirror snapshot; the packages are still signed
        apt = "apt-get -q -o Acquire::Check-Valid-Until=false"
        script = f"{apt} update && {apt} install -y --no-install-recommends {' '.join(CHROOT_PACKAGES)}"
        run_logged(["chroot", str(partial), "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in apt_env().items()],
                    "sh", "-c", script], f"install Slurm in the {suite} chroot", out, str(log) if log else "no log")
        (partial / CHROOT_MARK.lstrip("/")).write_text(f"burstd test bed chroot: Slurm {release} ({suite})\n")
    if root.exists():
        shutil.rmtree(root)
    partial.rename(root)
    return root


def debootstrap(target: Path, suite: str, out) -> None:
    """``burstd.image.debian.debootstrap`` (the same Debian a local node image starts from), failing as BedError."""
    debian.debootstrap(target, suite, out, failed=BedError)


def run_logged(argv: list[str], what: str, out, log_name: str = "the bed's log/chroot-build.log") -> None:
    debian.run_logged(argv, what, out, log_name, failed=BedError)


def sync_users(root: Path, users: tuple[str, ...]) -> None:
    """The test users and slurmrestd's user, with the host's uids, so files and jobs agree across the chroot."""
    import grp
    import pwd

    for name in (*TEST_USERS, *users):
        pw = pwd.getpwnam(name)
        gr = grp.getgrgid(pw.pw_gid)
        _ensure_line(root / "etc/passwd", name,
                     f"{name}:x:{pw.pw_uid}:{pw.pw_gid}:{pw.pw_gecos}:{pw.pw_dir}:{pw.pw_shell}")
        _ensure_line(root / "etc/group", gr.gr_name, f"{gr.gr_name}:x:{gr.gr_gid}:")
        home = root / pw.pw_dir.lstrip("/")
        if not home.exists():
            home.mkdir(parents=True, exist_ok=True)
            os.chown(home, pw.pw_uid, pw.pw_gid)


def sync_hosts(root: Path) -> None:
    """debootstrap's minbase has no /etc/hosts: give the chroot the host's (localhost, the head node's name)."""
    _replace(root / "etc/hosts", Path("/etc/hosts").read_text())


def _ensure_line(path: Path, name: str, line: str) -> None:
    lines = path.read_text().splitlines()
    if any(existing.split(":", 1)[0] == name for existing in lines):
        return
    _replace(path, "\n".join(lines + [line]) + "\n")


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a reader never sees it truncated (two beds once did, at once, and the
    chroot's /etc/passwd lost every system user, munge's among them)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def enter_script(root: Path, state_dir: Path) -> str:
    """<state>/bin/enter: run a command inside the chroot, in a private mount namespace of its own."""
    inner = ('R="$1"; S="$2"; shift 2; '
             'mount --rbind /proc "$R/proc" && mount --rbind /sys "$R/sys" && mount --rbind /dev "$R/dev" && '
             'mount --bind "$S" "$R$S" && exec chroot "$R" "$@"')
    return ("#!/bin/sh\n"
            "# burstd test bed: run a command in the bed's Slurm chroot. Generated by `burstctl testbed up`.\n"
            f"exec unshare --mount --propagation private -- /bin/sh -c {shlex.quote(inner)} sh "
            f"{shlex.quote(str(root))} {shlex.quote(str(state_dir))} \"$@\"\n")


def command_script(bin_dir: Path, inner_path: str) -> str:
    # Jobs inherit the submitter's PATH, and <state>/bin is visible inside the chroot: there (a job's `srun`)
    # the wrapper is the real command, not a second (unprivileged) entry.
    return (f"#!/bin/sh\n[ -e {CHROOT_MARK} ] && exec {shlex.quote(inner_path)} \"$@\"\n"
            f'exec {shlex.quote(str(bin_dir / "enter"))} {shlex.quote(inner_path)} "$@"\n')


def write_wrappers(root: Path, state_dir: Path, bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (root / str(state_dir).lstrip("/")).mkdir(parents=True, exist_ok=True)  # the bind mount's target
    files = {"enter": enter_script(root, state_dir)}
    files.update({name: command_script(bin_dir, inner) for name, inner in COMMANDS.items()})
    for name, text in files.items():
        tmp = bin_dir / f".{name}.tmp"
        tmp.write_text(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, bin_dir / name)


def user_argv(bin_dir: Path, user: str, argv: list[str]) -> list[str]:
    """A command as ``user`` in the chroot: entering needs root, so runuser runs inside it."""
    inner = COMMANDS.get(argv[0], argv[0])
    return [str(bin_dir / "enter"), "/usr/sbin/runuser", "-u", user, "--", inner, *argv[1:]]


def munge_ok(bin_dir: Path) -> bool:
    enter = str(bin_dir / "enter")
    try:
        enc = subprocess.run([enter, "/usr/bin/munge", "-n"], capture_output=True, timeout=10,
                             env={"PATH": netns.SANE_PATH})
        if enc.returncode != 0:
            return False
        return subprocess.run([enter, "/usr/bin/unmunge"], input=enc.stdout, capture_output=True, timeout=10,
                              env={"PATH": netns.SANE_PATH}).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_munge(root: Path, bin_dir: Path) -> None:
    """The chroot's own munged (its key, its socket under <chroot>/run/munge), shared by the beds of that
    release like the host's: started if not answering, never stopped."""
    import fcntl

    from burstd.testbed.host import _wait

    if munge_ok(bin_dir):
        return
    # two beds of one release (pytest -n 2) come up at once: one starts munged, the other waits for it to answer
    with open(root.parent / f".{root.name}.munged.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if munge_ok(bin_dir):
            return
        _sh([str(bin_dir / "enter"), "/bin/sh", "-c",
             "mkdir -p /run/munge && chown munge:munge /run/munge && "
             "{ [ -s /etc/munge/munge.key ] || mungekey -c -k /etc/munge/munge.key; } && "
             "chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key && "
             "runuser -u munge -- /usr/sbin/munged"], "start the chroot's munged")
        _wait(lambda: munge_ok(bin_dir), 15, "the chroot's munged to answer")


@contextmanager
def build_lock(slurm_release: str) -> Iterator[None]:
    """One chroot build at a time per release (two beds may ask at once)."""
    import fcntl

    CHROOT_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CHROOT_ROOT / f".{slurm_release}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
