"""The bed's cloud VMs booted from a node image (``BedConfig.cloud_image``; ``burstctl testbed up --cloud-image``).

With an image, each cloud VM is ``providers/local/vmroot.py``'s: its own root (an overlay over the image's rootfs),
scratch disk and mount namespace, the head's munge key and the test users arriving at boot, and the parity gate
before slurmd: the image's ``burstctl image check`` against the on-prem side's fingerprint, which ``up`` measures
(``<state>/parity-reference.json``) with the bed's allowed differences (``<state>/parity.toml``). The on-prem
nodes of a bed are namespaces on the head, so their fingerprint is the head's: its own Slurm, or for a release
bed (24.11, 26.05) the chroot's, measured from the host (``chroot_fingerprint``).

``cloud_image`` is a folder as ``burstctl image build --provider local --out DIR`` made it (DIR/rootfs), or
``"default"``: the image of the bed's release from the spec below, built once per machine into the cache
(``burstd.image.cache``).
"""

from __future__ import annotations

import json
from pathlib import Path

import tomlkit

from burstd.image import cache
from burstd.image.recipe import MARK
from burstd.image.spec import ImageSpec
from burstd.providers.local import vmroot
from burstd.testbed.config import BedConfig
from burstd.testbed.host import TEST_USERS, BedError

DEFAULT = "default"
IMAGE_SLURMD = "/usr/sbin/slurmd"
# The bed's on-prem side is the head node's own Python and pip packages, a node image's job environment a venv
# of its own: their package lists differ by design. The head's Slurm also carries slurmdbd's MySQL plugins,
# which no compute node has (why a site takes its reference from a compute node: docs/clouds.md).
BED_ALLOW = ("python.package.*", "slurm.plugin.*_mysql")
JOB_PYTHON = "/opt/burstd/jobenv/bin/python"


def default_spec(release: str) -> ImageSpec:
    """The bed's own node image: Slurm of the bed's release, no torch (the bed's jobs do not need it; a site's
    image does: docs/clouds.md) and one pinned package in the job environment (/opt/burstd/jobenv), which the
    head does not have."""
    return ImageSpec(slurm_release=release, torch=False,
                     python_packages=["six==1.16.0"])


def image_dir(cfg: BedConfig) -> Path | None:
    """The image folder the cloud VMs boot from (None: they share the head's filesystem)."""
    if cfg.cloud_image is None:
        return None
    if cfg.cloud_image == DEFAULT:
        return cache.image_dir(default_spec(cfg.slurm_release or "22.05"), cfg.slurm_release or "22.05")
    return Path(cfg.cloud_image)


def ensure_image(cfg: BedConfig) -> Path | None:
    """The image's rootfs, built into the cache first when ``cloud_image`` is ``default`` and it is not there;
    a named folder that is no image is a BedError naming it."""
    if cfg.cloud_image is None:
        return None
    if cfg.cloud_image == DEFAULT:
        release = cfg.slurm_release or "22.05"
        return cache.ensure(default_spec(release), release) / "rootfs"
    rootfs = Path(cfg.cloud_image) / "rootfs"
    if not (rootfs / MARK.lstrip("/")).is_file():
        raise BedError(f"--cloud-image {cfg.cloud_image}: no {rootfs}{MARK}; build one with `burstctl image build "
                       f"--provider local --slurm-release R --out {cfg.cloud_image}`")
    return rootfs


def gated(cfg: BedConfig) -> bool:
    """Whether the cloud VMs are gated: whenever they boot from an image (the host's Slurm, or a release chroot)."""
    return cfg.cloud_image is not None


def chroot_fingerprint(root: Path) -> dict[str, str]:
    """A release bed's on-prem side, measured from the host: its OS, Slurm (release, plugins) and munge run from
    the chroot (``chroot ROOT``). The chroot has no Python, so the reference names no job environment and the gate
    compares none."""
    from burstd.agent.fingerprint import PLUGIN_DIRS, munge_facts, os_facts, slurm_facts

    prefix = ("chroot", str(root))
    facts = os_facts(root / "etc/os-release")
    facts |= slurm_facts(plugin_dirs=[f"{root}{d}" for d in PLUGIN_DIRS], prefix=prefix)
    facts |= munge_facts(prefix=prefix)
    return dict(sorted(facts.items()))


def gate_files(state_dir: Path) -> tuple[Path, Path]:
    return state_dir / "parity-reference.json", state_dir / "parity.toml"


def write_gate_files(cfg: BedConfig, measure=None, measure_chroot=None) -> None:
    """The on-prem reference and the bed's parity settings, for the cloud VMs' gate (measured on the head, or in
    a release bed's chroot)."""
    if not gated(cfg):
        return
    from burstd.agent.fingerprint import fingerprint

    reference, spec = gate_files(cfg.state_path)
    if cfg.slurm_release is None:
        facts = (measure or fingerprint)(job_python="/usr/bin/python3")
    else:
        from burstd.testbed.release import chroot_path

        facts = (measure_chroot or chroot_fingerprint)(chroot_path(cfg.slurm_release))
    reference.write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    spec.write_text(tomlkit.dumps({"parity": {"job_python": JOB_PYTHON, "allow": list(BED_ALLOW)}}))
    reference.chmod(0o644)
    spec.chmod(0o644)


def munge_key(cfg: BedConfig) -> str:
    """The key the bed's slurmctld uses: the host's, or its release chroot's."""
    if cfg.slurm_release is None:
        return "/etc/munge/munge.key"
    from burstd.testbed.release import chroot_path

    return str(chroot_path(cfg.slurm_release) / "etc/munge/munge.key")


def slurmd_dirs(cfg: BedConfig) -> tuple[str, ...]:
    """The folders slurm.conf names for slurmd (spool, log, pid): made in the VM, on its own disk."""
    s = cfg.state_path
    return (str(s / "spool"), str(s / "log"), str(s / "run"))


def cloud_root(cfg: BedConfig, node: str) -> vmroot.VmRoot | None:
    """What a cloud node's VM boots from (None: no image, or an on-prem node)."""
    folder = image_dir(cfg)
    if folder is None or node not in cfg.cloud_nodes:
        return None
    reference, spec = gate_files(cfg.state_path)
    return vmroot.VmRoot(image=str(folder / "rootfs"), vm_dir=str(cfg.state_path / "vms" / f"{cfg.netns_of(node)}.vm"),
                         munge_key=munge_key(cfg), users=TEST_USERS, make_dirs=slurmd_dirs(cfg),
                         parity_reference=str(reference) if gated(cfg) else None,
                         parity_spec=str(spec) if gated(cfg) else None)


def burstd_local_keys(cfg: BedConfig) -> dict[str, str | list[str]]:
    """The [pools.local] keys that boot the local provider's VMs from the image (none without one)."""
    folder = image_dir(cfg)
    if folder is None:
        return {}
    reference, spec = gate_files(cfg.state_path)
    keys: dict[str, str | list[str]] = {
        "image_rootfs": str(folder / "rootfs"), "munge_key_file": munge_key(cfg),
        "vm_users": list(TEST_USERS), "vm_dirs": list(slurmd_dirs(cfg)),
    }
    if gated(cfg):
        keys |= {"parity_reference_file": str(reference), "parity_spec_file": str(spec)}
    return keys
