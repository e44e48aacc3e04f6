"""The local provider's node image: a Debian root filesystem built with debootstrap, then install.sh in a chroot.

    DIR/rootfs/     the image (Debian <suite>, Slurm <release>, munge, the job environment, burstd-agent)
    DIR/files/      what was staged into it (install.sh, node-bootstrap.sh, ...), kept as the build's record
    DIR/build.log   debootstrap's and install.sh's output

``relink`` and ``reinstall_burstd`` make another image of a built one with only burstd replaced (the image cache's
burstd layer, ``burstd.image.cache``): hard links for every file, fresh files for burstd's own.

debootstrap is ``burstd.image.debian``'s (the same that builds the test bed's 24.11 / 26.05 chroots), so a bed
and an image of one release start from the same Debian. Building needs root, debootstrap and the Debian mirror; it
takes minutes (torch is the largest part).
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from burstd.image import debian
from burstd.image.recipe import MARK, STAGE_IN_IMAGE, ImageBuildFailed, ImageError, Target
from burstd.providers.local.netns import SANE_PATH

# pip settings a build inherits from the host, so a site behind a TLS-inspecting proxy or with its own package
# index builds the image as it installs anything else; nothing else of the caller's environment reaches the chroot
PIP_PASSTHROUGH = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT",
                   "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
PIP_CA_IN_STAGE = "pip-ca.crt"  # the host's CA bundle for pip, staged for the build and removed with the stage

# paths that would hold a cluster secret or a node's credential: they arrive at boot, never in the image
SECRET_PATHS = ("etc/munge/munge.key", "etc/burstd/agent.token", "var/lib/burstd-node/agent.token")


@dataclass(frozen=True)
class RootfsPlan:
    """Where a local build puts things and the chroot command that runs the recipe (no I/O to make one)."""

    out_dir: Path
    suite: str
    build_env: tuple[str, ...] = field(default=())  # NAME=value pairs install.sh runs with (host_build_env)

    @property
    def rootfs(self) -> Path:
        return self.out_dir / "rootfs"

    @property
    def stage(self) -> Path:
        return self.rootfs / STAGE_IN_IMAGE.lstrip("/")

    @property
    def log(self) -> Path:
        return self.out_dir / "build.log"

    @property
    def install_argv(self) -> list[str]:
        return ["chroot", str(self.rootfs), "/usr/bin/env", "-i", f"PATH={SANE_PATH}", "LANG=C",
                "DEBIAN_FRONTEND=noninteractive", *self.build_env, "/bin/bash", f"{STAGE_IN_IMAGE}/install.sh", STAGE_IN_IMAGE]


def plan(out_dir: Path, tgt: Target) -> RootfsPlan:
    if tgt.provider != "local":
        raise ImageError(f"a root filesystem is the local provider's image, not {tgt.provider!r}'s")
    return RootfsPlan(out_dir.resolve(), tgt.suite)


def host_pip_ca(environ: Mapping[str, str], pip_conf: Path = Path("/etc/pip.conf")) -> Path | None:
    """The CA bundle the host's pip trusts (``PIP_CERT``, else ``cert`` in /etc/pip.conf), if it names one."""
    named = environ.get("PIP_CERT")
    if not named and pip_conf.is_file():
        conf = configparser.ConfigParser()
        try:
            conf.read(pip_conf)
        except configparser.Error:
            return None
        named = conf.get("global", "cert", fallback=None)
    return Path(named) if named and Path(named).is_file() else None


def host_build_env(environ: Mapping[str, str], ca_staged: bool) -> tuple[str, ...]:
    """The pip settings install.sh inherits (a pure read of ``environ``)."""
    pairs = [f"{k}={environ[k]}" for k in PIP_PASSTHROUGH if environ.get(k)]
    if ca_staged:
        pairs.append(f"PIP_CERT={STAGE_IN_IMAGE}/{PIP_CA_IN_STAGE}")
    return tuple(pairs)


def leaked_secrets(rootfs: Path) -> list[str]:
    """The secret paths present in ``rootfs`` (each one a reason to refuse the image)."""
    return [p for p in SECRET_PATHS if (rootfs / p).exists()]


def build(p: RootfsPlan, files: dict[str, str], wheel: Path) -> Path:
    """Run the plan: debootstrap (kept from an earlier run when complete), stage, install.sh, unstage, check."""
    from burstd.image.recipe import write_stage

    if shutil.which("debootstrap", path=SANE_PATH) is None:
        raise ImageBuildFailed("debootstrap is missing; run: bash scripts/install-deps.sh")
    p.out_dir.mkdir(parents=True, exist_ok=True)
    write_stage(files, p.out_dir / "files", wheel)
    with open(p.log, "ab") as out:
        debian.debootstrap(p.rootfs, p.suite, out, failed=ImageBuildFailed)
        shutil.rmtree(p.stage, ignore_errors=True)
        write_stage(files, p.stage, wheel)
        ca = host_pip_ca(os.environ)
        if ca is not None:
            shutil.copyfile(ca, p.stage / PIP_CA_IN_STAGE)
        p = RootfsPlan(p.out_dir, p.suite, host_build_env(os.environ, ca is not None))
        debian.run_logged(p.install_argv, "the image recipe (install.sh) in the rootfs", out, log_name=str(p.log),
                          failed=ImageBuildFailed)
    shutil.rmtree(p.stage)
    leaked = leaked_secrets(p.rootfs)
    if leaked:
        raise ImageBuildFailed(f"the image holds {', '.join(leaked)}: a cluster secret must arrive at boot, "
                               "never be baked in")
    if not (p.rootfs / MARK.lstrip("/")).exists():
        raise ImageBuildFailed(f"install.sh ended without writing {MARK}; see {p.log}")
    return p.rootfs


def relink(base: Path, out: Path) -> None:
    """``out``: a copy of the image ``base`` whose directories are its own and whose files are hard links to the
    base's (seconds, and no space). ``cp -al`` keeps the directories' owners and modes, which munge checks."""
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["cp", "-al", "--", str(base), str(out)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise ImageBuildFailed(f"could not link the image {base} into {out}: {proc.stderr.strip()[-300:]}")


def _own_inodes(folder: Path) -> None:
    """Give each hard-linked file under ``folder`` an inode of its own (a copy renamed over it), so what pip
    writes there can never reach the image the file was linked from."""
    for path in [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]:
        if path.stat().st_nlink > 1:
            fresh = path.with_name(path.name + ".burstd-unlink")
            shutil.copy2(path, fresh)
            os.replace(fresh, path)


def reinstall_burstd(rootfs: Path, wheel: Path, venvs: Sequence[str], log: Path) -> None:
    """Replace burstd in each venv of the image at ``rootfs`` (paths inside it) by ``wheel``, with no
    dependencies (the image's key holds burstd's requirements: a change there is a new image). Run in a chroot
    with the image's own Python, as install.sh runs. Every file of burstd's and each venv's ``bin/`` gets an inode
    of its own first: ``rootfs`` may be ``relink``'s copy of another image."""
    from burstd.image import debian

    stage_in_image = "/var/tmp/burstd-reinstall"
    stage = rootfs / stage_in_image.lstrip("/")
    stage.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, stage / wheel.name)
    with open(log, "ab") as out:
        for venv in venvs:
            inside = rootfs / venv.lstrip("/")
            if not (inside / "bin" / "python").exists():
                raise ImageBuildFailed(f"the image at {rootfs} has no venv {venv} to put burstd in")
            for sub in (inside / "bin", *inside.glob("lib/python3*/site-packages/burstd"),
                        *inside.glob("lib/python3*/site-packages/burstd-*.dist-info")):
                _own_inodes(sub)
            debian.run_logged(["chroot", str(rootfs), "/usr/bin/env", "-i", f"PATH={SANE_PATH}", "LANG=C",
                               "HOME=/root", f"{venv}/bin/python", "-m", "pip", "install", "-q", "--no-deps",
                               "--force-reinstall", "--no-index", "--no-cache-dir",
                               f"{stage_in_image}/{wheel.name}"],
                              f"burstd into {venv} of the image", out, log_name=str(log), failed=ImageBuildFailed)
    shutil.rmtree(stage)
