"""Local node images built once per machine and kept: ``/var/lib/burstd-testbed/images/<release>-<digests>``.

    root = ensure(ImageSpec(slurm_release="22.05", torch=False), "22.05") / "rootfs"

The key is the spec's digest (``recipe.spec_digest``: the spec, the provider, the release) and the rendered
recipe's, so a changed spec or recipe is another image and an unchanged one is never rebuilt: tests and CI reuse it (``scripts/install-deps.sh``
builds the bed's default image once). A build goes into ``<key>.partial`` and is renamed when complete, under a
lock per key, so two beds asking at once build it once and an interrupted build is never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from burstd.image.recipe import MARK, spec_digest, stage_files, target
from burstd.image.spec import ImageSpec

IMAGES_ROOT = Path(os.environ.get("BURSTD_IMAGE_CACHE", "/var/lib/burstd-testbed/images"))


def image_dir(spec: ImageSpec, release: str, root: Path | None = None) -> Path:
    """Where the image of ``spec`` for Slurm ``release`` is (or will be) kept; no I/O. The name carries the spec's
    digest and the rendered recipe's (install.sh, node-bootstrap.sh, the agent's unit): a burstd whose recipe
    changed builds a new image instead of booting a stale one."""
    tgt = target(spec, "local", release)
    files = json.dumps(stage_files(spec, tgt), sort_keys=True).encode()
    return (root or IMAGES_ROOT) / f"{release}-{spec_digest(spec, tgt)}-{hashlib.sha256(files).hexdigest()[:8]}"


def is_built(folder: Path) -> bool:
    return (folder / "rootfs" / MARK.lstrip("/")).is_file()


def ensure(spec: ImageSpec, release: str, root: Path | None = None, build=None) -> Path:
    """The image folder (``<folder>/rootfs``), built first if it is not in the cache. ``build(spec, target,
    out_dir)`` is ``burstd.image.build.build_image`` unless a caller passes its own."""
    folder = image_dir(spec, release, root)
    if is_built(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(folder):  # another process built it while we waited
            return folder
        if build is None:
            from burstd.image.build import build_image as build
        partial = folder.with_name(folder.name + ".partial")
        build(spec, target(spec, "local", release), partial)  # keeps a finished debootstrap between tries
        if not is_built(partial):
            raise RuntimeError(f"the image build into {partial} ended without {MARK}")
        if folder.exists():
            shutil.rmtree(folder)
        partial.rename(folder)
    return folder
