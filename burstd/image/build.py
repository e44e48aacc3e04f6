"""``burstctl image build``: one spec, every provider.

    render(spec, target("aws", "22.05"))   # {"image.pkr.json": ..., "files/install.sh": ..., ...}  (pure)
    build_image(spec, tgt, Path("out"), wheel)   # writes them (aws, gcp) or builds out/rootfs (local)

Every provider's image also carries burstd itself (the agent), as a wheel of the running burstd unless the admin
names one. ``burstd_layer`` gives a built local image the running burstd (the image cache's second layer).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from burstd.image import packer, rootfs
from burstd.image.recipe import ImageBuildFailed, ImageError, Target, stage_files, write_stage
from burstd.image.spec import ImageSpec


def render(spec: ImageSpec, tgt: Target) -> dict[str, str]:
    """What an AWS or GCP build hands Packer, by path under DIR (the wheel apart)."""
    files = {"image.pkr.json": json.dumps(packer.template(spec, tgt), indent=2) + "\n"}
    files.update({f"files/{name}": text for name, text in stage_files(spec, tgt).items()})
    return files


def agent_wheel(dest: Path) -> Path:
    """A wheel of the running burstd (from its source tree) in ``dest``."""
    import burstd

    source = Path(burstd.__file__).resolve().parents[1]
    if not (source / "pyproject.toml").is_file():
        raise ImageBuildFailed(f"burstd at {source} is not a source tree: pass --agent-wheel")
    dest.mkdir(parents=True, exist_ok=True)
    # built from a copy of the tree: setuptools builds in place through build/lib, which keeps every file the tree
    # ever had (a module deleted or moved would ride along in the image), and two builds side by side would collide
    with tempfile.TemporaryDirectory(prefix="burstd-wheel-src-") as tmp:
        tree = Path(tmp) / "burstd-src"
        tree.mkdir()
        for name in ("pyproject.toml", "README.md"):
            if (source / name).is_file():
                shutil.copy2(source / name, tree / name)
        shutil.copytree(source / "burstd", tree / "burstd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                               "-w", str(dest), str(tree)], capture_output=True, text=True, timeout=600)
    wheels = sorted(dest.glob("burstd-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ImageBuildFailed(f"could not build the burstd wheel from {source}: {proc.stderr.strip()[-500:]}")
    return wheels[-1]


def build_image(spec: ImageSpec, tgt: Target, out_dir: Path, wheel: Path | None = None) -> list[Path]:
    """Build (local) or render (aws, gcp) the image; the paths made. ``wheel``: the agent's burstd wheel (None:
    built from the running burstd, once the target is known to be buildable)."""
    if wheel is not None and not (wheel.name.startswith("burstd-") and wheel.suffix == ".whl" and wheel.is_file()):
        raise ImageError(f"--agent-wheel {wheel}: not a burstd-*.whl file")
    if tgt.provider == "local":
        plan = rootfs.plan(out_dir, tgt)
        return [rootfs.build(plan, stage_files(spec, tgt), wheel or agent_wheel(out_dir / "wheel"))]
    files = render(spec, tgt)  # first: a target Packer cannot build leaves nothing behind
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = wheel or agent_wheel(out_dir / "wheel")
    (out_dir / "image.pkr.json").write_text(files.pop("image.pkr.json"))
    write_stage({name.removeprefix("files/"): text for name, text in files.items()}, out_dir / "files", wheel)
    return [out_dir / "image.pkr.json", out_dir / "files"]


def burstd_layer(base: Path, out: Path, venvs: tuple[str, ...], stale: bool) -> None:
    """The local image ``out``: ``base`` (a built rootfs) with the running burstd in ``venvs``; only links when
    the base was built from this very burstd (``stale`` False)."""
    rootfs.relink(base, out)
    if stale:
        with tempfile.TemporaryDirectory(prefix="burstd-wheel-") as tmp:
            rootfs.reinstall_burstd(out, agent_wheel(Path(tmp)), venvs, out.parent / "build.log")
