"""Local node images built once per machine and kept: ``/var/lib/burstd-testbed/images/<key>.burstd-<source>``.

    root = ensure(ImageSpec(slurm_release="22.05", torch=False), "22.05") / "rootfs"

An image is two layers, each built only when its inputs change:

* the **base**, ``<release>-<spec>-<recipe>``: debootstrap, Slurm, munge, the job environment, burstd's
  requirements. Its key is the spec's digest (``recipe.spec_digest``: the spec, the provider, the release), the
  rendered recipe's (install.sh, node-bootstrap.sh, the agent's unit) and burstd's declared requirements. Minutes
  to build, so tests and CI reuse it (``scripts/build-bed-images.sh`` builds the bed's once).
* the **burstd layer**, ``<base>.burstd-<source>``: the base with the burstd of this source tree in the agent's
  venv and the job environment. Its key is the digest of burstd's files, so a VM always runs the agent, the parity
  gate and ``burstd.train`` of the code under test, never the burstd the base was first built with. Its files are
  hard links to the base's except burstd's own (``rootfs.relink``, ``rootfs.reinstall_burstd``): seconds, and a
  few MB. Layers unused for a day are removed when another is made; a base is never touched once built.

Each build goes into ``<name>.partial`` and is renamed when complete, under a lock per name, so two beds asking at
once build it once and an interrupted build is never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from burstd.image.recipe import AGENT_VENV, MARK, spec_digest, stage_files, target
from burstd.image.spec import ImageSpec

IMAGES_ROOT = Path(os.environ.get("BURSTD_IMAGE_CACHE", "/var/lib/burstd-testbed/images"))
SOURCE_FILE = "burstd-source"  # in an image folder: the digest of the burstd it holds
LAYER_UNUSED_S = 24 * 3600  # a burstd layer not asked for this long is removed when another is made

# (base rootfs, new rootfs, the venvs to give this burstd, whether the base holds another burstd) -> None
Layer = Callable[[Path, Path, tuple[str, ...], bool], None]


def source_digest(package: Path | None = None) -> str:
    """The digest of the burstd package an image gets (its files but bytecode, by path and content)."""
    if package is None:
        import burstd

        package = Path(burstd.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _requirements() -> list[str]:
    """What install.sh installs with burstd's wheel (``burstd[aws]``), as the source tree's pyproject.toml declares
    it: a change is a new base. (An installed burstd's metadata can be older than its source: an editable install
    keeps the requirements of the day it was made.)"""
    import burstd

    pyproject = Path(burstd.__file__).resolve().parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        try:
            return sorted(metadata.requires("burstd") or [])
        except metadata.PackageNotFoundError:
            return []
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    return sorted([*project.get("dependencies", []), *project.get("optional-dependencies", {}).get("aws", [])])


def base_dir(spec: ImageSpec, release: str, root: Path | None = None) -> Path:
    """Where the base image of ``spec`` for Slurm ``release`` is (or will be) kept."""
    tgt = target(spec, "local", release)
    files = json.dumps([stage_files(spec, tgt), _requirements()], sort_keys=True).encode()
    return (root or IMAGES_ROOT) / f"{release}-{spec_digest(spec, tgt)}-{hashlib.sha256(files).hexdigest()[:8]}"


def image_dir(spec: ImageSpec, release: str, root: Path | None = None, source: str | None = None) -> Path:
    """Where the image a VM boots is (or will be) kept: the base with this burstd (``source``: its digest)."""
    base = base_dir(spec, release, root)
    return base.with_name(f"{base.name}.burstd-{source or source_digest()}")


def is_built(folder: Path) -> bool:
    return (folder / "rootfs" / MARK.lstrip("/")).is_file()


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _make(folder: Path, make: Callable[[Path], None]) -> None:
    """``make(partial)``, then ``partial`` renamed to ``folder`` once it is an image; under ``folder``'s lock."""
    with _locked(folder):
        if is_built(folder):  # another process made it while we waited
            return
        partial = folder.with_name(folder.name + ".partial")
        make(partial)
        if not is_built(partial):
            raise RuntimeError(f"the image build into {partial} ended without {MARK}")
        if folder.exists():
            shutil.rmtree(folder)
        partial.rename(folder)


def ensure(spec: ImageSpec, release: str, root: Path | None = None, build=None, layer: Layer | None = None) -> Path:
    """The image folder (``<folder>/rootfs``) with this burstd, built first where it is not in the cache.
    ``build(spec, target, out_dir)`` is ``burstd.image.build.build_image`` and ``layer`` is
    ``burstd.image.build.burstd_layer`` unless a caller passes its own."""
    source = source_digest()
    folder = image_dir(spec, release, root, source)
    if not is_built(folder):
        from burstd.image import build as builder

        build, layer = build or builder.build_image, layer or builder.burstd_layer
        base = base_dir(spec, release, root)

        def make_base(partial: Path) -> None:
            build(spec, target(spec, "local", release), partial)  # keeps a finished debootstrap between tries
            (partial / SOURCE_FILE).write_text(source)  # the burstd its wheel was built from

        def make_layer(partial: Path) -> None:
            shutil.rmtree(partial, ignore_errors=True)
            recorded = base / SOURCE_FILE
            stale = not recorded.is_file() or recorded.read_text().strip() != source
            layer(base / "rootfs", partial / "rootfs", (AGENT_VENV, spec.job_env), stale)
            (partial / SOURCE_FILE).write_text(source)

        _make(base, make_base)  # nothing to do when the base is built
        _make(folder, make_layer)
        _prune_layers(base, keep=folder)
    os.utime(folder)  # in use: not pruned for another LAYER_UNUSED_S
    return folder


def _prune_layers(base: Path, keep: Path) -> None:
    """Remove the base's other burstd layers not asked for in LAYER_UNUSED_S (a VM of another checkout may still
    boot from a recent one)."""
    cutoff = time.time() - LAYER_UNUSED_S
    for other in base.parent.glob(f"{base.name}.burstd-*"):
        if other == keep or other.name.endswith(".partial") or not other.is_dir() or other.stat().st_mtime > cutoff:
            continue
        shutil.rmtree(other, ignore_errors=True)
        (other.parent / f".{other.name}.lock").unlink(missing_ok=True)
