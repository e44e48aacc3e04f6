"""The systemd units and the admin guide agree: after the guide's install step links the entry points into
/usr/bin, ``systemd-analyze verify`` passes on both units. The links are made inside a private mount namespace
over an overlay of /usr/bin, so the test changes nothing on the machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = [REPO / "systemd" / "burstd.service", REPO / "systemd" / "burstd-agent.service"]
GUIDE = REPO / "docs" / "admin-guide.md"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("systemd-analyze") or not shutil.which("unshare"),
                                reason="needs root, systemd-analyze (install-deps.sh) and unshare")


def _exec_paths() -> set[str]:
    paths = set()
    for unit in UNITS:
        for m in re.finditer(r"^ExecStart=(\S+)", unit.read_text(), re.M):
            paths.add(m.group(1))
    return paths


def _guide_links() -> list[str]:
    """The entry points the guide's install step links into /usr/bin (its `ln -sf ... /usr/bin/` line)."""
    line = next(x for x in GUIDE.read_text().splitlines() if "ln -sf" in x and x.rstrip().endswith("/usr/bin/"))
    return [Path(a).name for a in line.split() if a.startswith("/opt/burstd/bin/")]


def test_the_guide_links_every_entry_point_the_units_start():
    assert _exec_paths() == {"/usr/bin/burstd", "/usr/bin/burstd-agent"}
    assert {Path(p).name for p in _exec_paths()} <= set(_guide_links())


def test_units_verify_once_installed_as_the_guide_says(tmp_path):
    venv_bin = Path(sys.executable).parent  # stands in for /opt/burstd/bin
    before = os.path.lexists("/usr/bin/burstd")
    links = " ".join(f"ln -sf {venv_bin / name} /usr/bin/{name};" for name in _guide_links())
    for d in ("upper", "work"):
        (tmp_path / d).mkdir()
    script = (f"mount -t overlay overlay -o lowerdir=/usr/bin,upperdir={tmp_path}/upper,workdir={tmp_path}/work "
              f"/usr/bin && {links} systemd-analyze verify --man=no {' '.join(map(str, UNITS))}")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert os.path.lexists("/usr/bin/burstd") == before  # the links stayed in the namespace
    # and without the links it fails naming the missing entry point (the check is real)
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f"systemd-analyze verify --man=no {UNITS[0]}"], capture_output=True, text=True, timeout=60)
    if not Path("/usr/bin/burstd").exists():
        assert r.returncode != 0 and "/usr/bin/burstd" in r.stderr, r.stderr
