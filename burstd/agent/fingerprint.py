"""Measure this machine's fingerprint for the parity gate (``burstd.domain.parity``).

    facts = fingerprint(job_python="/opt/burstd/jobenv/bin/python", checks=cfg.parity.checks)

Run on an on-prem compute node it records the reference (``burstctl image fingerprint > reference.json``); run
on a new cloud node before slurmd starts it is what the gate compares. Every probe tolerates absence: a missing
program, file or package leaves its facts out (and the comparison names what the node lacks), never raises.
Commands run without a shell, with a fixed PATH and a timeout each.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from burstd.image.spec import ParityCheck
from burstd.providers.local.netns import SANE_PATH

# where distributions put Slurm's plugins (Debian's multiarch dir first)
PLUGIN_DIRS = ("/usr/lib/*/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm", "/usr/local/lib/slurm")
PRESENT = "present"
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)*)\b")
# installer tooling, not what jobs import: its version follows the venv's creation, not the site's choice
_NOT_JOB_PACKAGES = {"pip"}
_CHECK_OUTPUT_MAX = 200
_PACKAGES_SNIPPET = (
    "import importlib.metadata as m, json, platform\n"
    "pkgs = {}\n"
    "for d in m.distributions():\n"
    "    name = d.metadata['Name']\n"
    "    if name: pkgs[name] = d.version\n"
    "print(json.dumps({'version': platform.python_version(), 'packages': pkgs}))\n"
)


def run(argv: Sequence[str], timeout_s: float = 10.0) -> tuple[int, str] | None:
    """(exit status, stdout) of ``argv``; None when it cannot run at all (not installed, timed out)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout_s,
                              stdin=subprocess.DEVNULL, env={"PATH": SANE_PATH, "LANG": "C"})
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return proc.returncode, proc.stdout


def _ok_output(argv: Sequence[str], timeout_s: float = 10.0) -> str | None:
    result = run(argv, timeout_s)
    return result[1] if result is not None and result[0] == 0 else None


def _version(text: str | None) -> str | None:
    m = _VERSION.search(text or "")
    return m.group(1) if m else None


def slurm_facts(slurmd: str = "slurmd", plugin_dirs: Iterable[str] = PLUGIN_DIRS,
                prefix: Sequence[str] = ()) -> dict[str, str]:
    """``prefix``: what runs the commands elsewhere (``chroot ROOT``: a release bed's on-prem side)."""
    facts: dict[str, str] = {}
    release = _version(_ok_output([*prefix, slurmd, "-V"]))  # "slurm-wlm 22.05.8" (Debian), "slurm 24.11.5"
    if release:
        facts["slurm.release"] = release
    for pattern in plugin_dirs:
        for directory in sorted(glob.glob(pattern)):
            for so in Path(directory).glob("*.so"):
                facts[f"slurm.plugin.{so.stem}"] = PRESENT
    gres = re.search(r"\bGres=(\S+)", _ok_output([*prefix, slurmd, "-C"]) or "")  # only with gres.conf AutoDetect
    if gres and gres.group(1) != "(null)":
        facts["slurm.gres"] = gres.group(1)
    return facts


def munge_facts(munged: str = "munged", prefix: Sequence[str] = ()) -> dict[str, str]:
    version = _version(_ok_output([*prefix, munged, "-V"]))  # "munge-0.5.15 (2022-06-22)"
    return {"munge.version": version} if version else {}


def os_facts(os_release: Path = Path("/etc/os-release")) -> dict[str, str]:
    try:
        text = os_release.read_text()
    except OSError:
        return {}
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.M))
    name = fields.get("PRETTY_NAME") or fields.get("NAME")
    return {"os.release": name} if name else {}


def python_facts(job_python: str) -> dict[str, str]:
    """The job environment: its Python version, every installed distribution, torch apart."""
    out = _ok_output([job_python, "-c", _PACKAGES_SNIPPET], timeout_s=30.0)
    try:
        data = json.loads(out or "null")
        version, packages = data["version"], dict(data["packages"])
    except (ValueError, TypeError, KeyError):
        return {}
    facts = {"python.version": str(version)}
    for raw_name, pkg_version in packages.items():
        name = re.sub(r"[-_.]+", "-", str(raw_name)).lower()  # PEP 503: numpy, Numpy and num_py are one
        if name in _NOT_JOB_PACKAGES:
            continue
        key = "torch.version" if name == "torch" else f"python.package.{name}"
        facts[key] = str(pkg_version)
    return facts


def gpu_facts(nvidia_smi: str = "nvidia-smi") -> dict[str, str]:
    out = _ok_output([nvidia_smi, "--query-gpu=driver_version,name", "--format=csv,noheader"])
    rows = [[part.strip() for part in line.split(",", 1)] for line in (out or "").splitlines() if "," in line]
    if not rows:
        return {}
    return {"cuda.driver": rows[0][0], "gpu.model": ", ".join(sorted({row[1] for row in rows}))}


def check_facts(checks: Iterable[ParityCheck]) -> dict[str, str]:
    """The site's checks: the first line of stdout, ``exit N`` on failure; left out when it cannot run."""
    facts = {}
    for check in checks:
        result = run(check.argv, check.timeout_s)
        if result is None:
            continue
        status, out = result
        first = (out.strip().splitlines() or [""])[0].strip()[:_CHECK_OUTPUT_MAX]
        facts[f"check.{check.name}"] = first if status == 0 else f"exit {status}"
    return facts


def fingerprint(*, job_python: str = "/usr/bin/python3", checks: Iterable[ParityCheck] = (),
                features: Iterable[str] | None = None) -> dict[str, str]:
    """Every fact this machine offers (``features``: the Slurm features the node is declared with, if known)."""
    facts: dict[str, str] = {}
    facts.update(os_facts())
    facts.update(slurm_facts())
    facts.update(munge_facts())
    facts.update(python_facts(job_python))
    facts.update(gpu_facts())
    facts.update(check_facts(checks))
    if features is not None:
        facts["slurm.features"] = ",".join(sorted(set(features)))
    return dict(sorted(facts.items()))
