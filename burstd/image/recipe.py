"""The one recipe: ``install.sh``, the provisioning script every provider's image build runs as root.

The local rootfs runs it in a chroot after debootstrap (``burstd.image.rootfs``); Packer runs it on the Debian
cloud image it starts from (``burstd.image.packer``). It is rendered from the spec, and everything the spec holds
is quoted word by word (``shlex.quote``) on top of the spec's own narrow character sets. The script takes the
staging directory (``STAGE``) holding the files ``stage_files`` lists, and leaves no cluster secret behind:
munge's package makes a key of its own, which the script deletes (the node fetches the cluster's key at each boot,
``node-bootstrap.sh``).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from burstd.image.spec import DEBIAN_SUITES, ImageSpec
from burstd.providers.local.netns import SANE_PATH

PROVIDERS = ("local", "aws", "gcp")
STAGE_IN_IMAGE = "/tmp/burstd-image"  # where the builders put the staged files on the image being built
MARK = "/etc/burstd-image"  # JSON: what the image was built from (release, suite, provider, spec digest)
BOOTSTRAP_IN_IMAGE = "/usr/lib/burstd/node-bootstrap.sh"
AGENT_VENV = "/opt/burstd/agent"
# Slurm's node side and what node-bootstrap.sh and the agent use; per provider what fetches the munge key
# (slurmd loads AuthAltTypes' plugins too: a site with auth/jwt for slurmrestd needs slurm-wlm-jwt-plugin on nodes)
BASE_PACKAGES = ("slurmd", "slurm-client", "slurm-wlm-basic-plugins", "slurm-wlm-jwt-plugin", "munge", "libpmix2",
                 "python3", "python3-venv", "curl", "ca-certificates", "nftables", "procps", "util-linux")
PROVIDER_PACKAGES = {"local": (), "aws": ("awscli",), "gcp": ()}
_APT = "apt-get -q -o Acquire::Check-Valid-Until=false"  # sid's Release file can be past its Valid-Until


class ImageError(ValueError):
    """The spec and the options cannot make an image (no release named, no cloud image for the suite)."""


class ImageBuildFailed(RuntimeError):
    """A build step failed, or its result is not an image burstd may use (a secret left in it)."""


@dataclass(frozen=True)
class Target:
    """What one build makes: the provider and the Slurm release (hence the Debian suite)."""

    provider: str
    slurm_release: str

    @property
    def suite(self) -> str:
        return DEBIAN_SUITES[self.slurm_release]


def target(spec: ImageSpec, provider: str, slurm_release: str | None) -> Target:
    if provider not in PROVIDERS:
        raise ImageError(f"--provider {provider!r}: use one of {', '.join(PROVIDERS)}")
    release = slurm_release or spec.slurm_release
    if release is None:
        raise ImageError("no Slurm release: pass --slurm-release or set image.slurm_release")
    if release not in DEBIAN_SUITES:
        raise ImageError(f"--slurm-release {release!r}: burstd builds images for "
                         f"{', '.join(DEBIAN_SUITES)} (the Debian suites that carry them)")
    return Target(provider, release)


def spec_digest(spec: ImageSpec, tgt: Target) -> str:
    """Names the inputs of a build (tags, labels and the image's mark carry it)."""
    data = {"spec": spec.model_dump(mode="json"), "provider": tgt.provider, "release": tgt.slurm_release}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _cmd(*argv: str) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def render_install(spec: ImageSpec, tgt: Target) -> str:
    packages = (*BASE_PACKAGES, *PROVIDER_PACKAGES[tgt.provider], *spec.apt_packages)
    pip_env = f"{spec.job_env}/bin/pip"
    mark = json.dumps({"slurm_release": tgt.slurm_release, "suite": tgt.suite, "provider": tgt.provider,
                       "spec_digest": spec_digest(spec, tgt)}, sort_keys=True)
    lines = [
        "#!/bin/bash",
        f"# burstd node image for Slurm {tgt.slurm_release} (Debian {tgt.suite}), provider {tgt.provider}.",
        "# Rendered by `burstctl image build` from the image spec; run as root on the image being built:",
        "#   bash install.sh STAGE   (STAGE holds node-bootstrap.sh, burstd-agent.service and the burstd wheel)",
        "# Holds no secret: each node fetches the munge key at boot, with its own identity (node-bootstrap.sh).",
        "set -euo pipefail",
        'STAGE="${1:-$(dirname "$0")}"',
        f"export DEBIAN_FRONTEND=noninteractive LANG=C PATH={SANE_PATH}",
        'step() { echo "burstd-image: $*" >&2; }',
        'trap \'echo "burstd-image: FAILED at line $LINENO (exit $?)" >&2\' ERR',
        "",
        'step "no service may start while the image is built"',
        "printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d",
        "chmod 0755 /usr/sbin/policy-rc.d",
        "",
        f'step "Debian packages: Slurm {tgt.slurm_release} ({tgt.suite}), munge, Python, the site\'s additions"',
        f"{_APT} update",
        f"{_APT} install -y --no-install-recommends " + _cmd(*packages),
        'release="$(slurmd -V)"',
        f'case "$release" in "slurm {tgt.slurm_release}."* | "slurm-wlm {tgt.slurm_release}."*) ;;',
        f'    *) step "expected Slurm {tgt.slurm_release}, the packages gave: $release"; exit 1 ;;',
        "esac",
        "",
        f'step "the job environment: {spec.job_env}"',
        _cmd("python3", "-m", "venv", spec.job_env),
    ]
    if spec.python_packages:
        lines.append(_cmd(pip_env, "install", "-q", "--no-cache-dir", *spec.python_packages))
    if spec.torch:
        torch = "torch" + (f"=={spec.torch_version}" if spec.torch_version else "")
        index = ("--index-url", spec.torch_index_url) if spec.torch_index_url else ()
        lines.append(_cmd(pip_env, "install", "-q", "--no-cache-dir", *index, torch))
    lines += [
        "",
        'step "burstd.train in the job environment (the sbatch templates checkpoint and resume with it)"',
        # no dependencies: burstd.train needs only torch (spec.torch), never the daemon's packages
        f'{pip_env} install -q --no-cache-dir --no-deps "$STAGE"/burstd-*.whl',
        "",
        'step "burstd-agent (its own venv: it must not change the jobs\' packages)"',
        _cmd("python3", "-m", "venv", AGENT_VENV),
        # with boto3 (the aws extra): the node's Prolog/Epilog stage a job's data through the S3 API (issue 24)
        f'wheel=$(ls "$STAGE"/burstd-*.whl) && {AGENT_VENV}/bin/pip install -q --no-cache-dir "$wheel[aws]"',
        f"ln -sf {AGENT_VENV}/bin/burstd-agent /usr/bin/burstd-agent",
        'install -D -m 0644 "$STAGE/burstd-agent.service" /etc/systemd/system/burstd-agent.service',
        f'install -D -m 0755 "$STAGE/node-bootstrap.sh" {BOOTSTRAP_IN_IMAGE}',
        "# slurmd starts from node-bootstrap.sh only (after the key, and the parity gate), never at boot by itself",
        "rm -f /etc/systemd/system/multi-user.target.wants/slurmd.service",
    ]
    if spec.commands:
        lines += ["", 'step "the site\'s own steps"', *(_cmd(*argv) for argv in spec.commands)]
    lines += [
        "",
        'step "no cluster secret in the image: munge\'s package made a key; each node gets the cluster\'s at boot"',
        "rm -f /etc/munge/munge.key /usr/sbin/policy-rc.d",
        f"{_APT} clean",
        f"printf '%s\\n' {shlex.quote(mark)} >{MARK}",
        f'step "done: Slurm $release, job environment {spec.job_env}"',
    ]
    return "\n".join(lines) + "\n"


def bootstrap_script() -> str:
    from burstd.providers.bootstrap import script_body

    return script_body()


def agent_unit() -> str:
    return resources.files("burstd.image").joinpath("burstd-agent.service").read_text()


def stage_files(spec: ImageSpec, tgt: Target) -> dict[str, str]:
    """The text files every build stages next to the burstd wheel (name -> content)."""
    return {"install.sh": render_install(spec, tgt), "node-bootstrap.sh": bootstrap_script(),
            "burstd-agent.service": agent_unit()}


def write_stage(files: dict[str, str], stage: Path, wheel: Path) -> None:
    import shutil

    stage.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (stage / name).write_text(text)
        (stage / name).chmod(0o755 if name.endswith(".sh") else 0o644)
    shutil.copy2(wheel, stage / wheel.name)
