"""Local node images built once per machine and kept: ``/var/lib/burstd-testbed/images/<release>-<digest>``.

    root = ensure(ImageSpec(slurm_release="22.05", torch=False), "22.05") / "rootfs"

The key is the spec's digest (``recipe.spec_digest``: the spec, the provider, the release), so a changed spec
is another image and an unchanged one is never rebuilt: tests and CI reuse it (``scripts/install-deps.sh``
builds the bed's default image once). A build goes into ``<key>.partial`` and is renamed when complete, under a
lock per key, so two beds asking at once build it once and an interrupted build is never used.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from burstd.image.recipe import MARK, spec_digest, target
from burstd.image.spec import ImageSpec

IMAGES_ROOT = Path(os.environ.get("BURSTD_IMAGE_CACHE", "/var/lib/burstd-testbed/images"))


def image_dir(spec: ImageSpec, release: str, root: Path | None = None) -> Path:
    """Where the image of ``spec`` for Slurm ``release`` is (or will be) kept; no I/O."""
    tgt = target(spec, "local", release)
    return (root or IMAGES_ROOT) / f"{release}-{spec_digest(spec, tgt)}"


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
