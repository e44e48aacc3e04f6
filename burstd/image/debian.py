"""A minimal Debian root filesystem with debootstrap: where a local node image (``image.rootfs``) and the test bed's
24.11 / 26.05 chroots (``testbed.release``) both start, so a bed and an image of one release start from the same
Debian. Each caller names the error it raises (``failed``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from burstd.providers.local.netns import SANE_PATH

MIRROR = "http://deb.debian.org/debian"


def apt_env() -> dict[str, str]:
    return {"PATH": SANE_PATH, "LANG": "C", "DEBIAN_FRONTEND": "noninteractive"}


def run_logged(argv: list[str], what: str, out, log_name: str = "the bed's log/chroot-build.log", *,
               failed: Callable[[str], Exception] = RuntimeError) -> None:
    proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=apt_env(), stdin=subprocess.DEVNULL,
                          timeout=1800)
    if proc.returncode != 0:
        raise failed(f"{what}: `{' '.join(argv[:4])} ...` failed (exit {proc.returncode}); see {log_name}")


def debootstrap(target: Path, suite: str, out, *, failed: Callable[[str], Exception] = RuntimeError) -> None:
    """A minimal Debian ``suite`` in ``target`` (kept when an earlier run got that far), its services held off."""
    if not (target / "usr/bin/apt-get").exists():
        shutil.rmtree(target, ignore_errors=True)
        run_logged(["debootstrap", "--variant=minbase", suite, str(target), MIRROR], f"debootstrap {suite}", out,
                   failed=failed)
    # no init system in a chroot: package scripts must not start the daemons they install
    (target / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
    os.chmod(target / "usr/sbin/policy-rc.d", 0o755)
