"""mypy over burstd/ (configured in pyproject.toml's [tool.mypy]): the seams are protocols, and the unit-test fakes
conform to them (tests/unit/daemon/fakes_conform.py). A type error anywhere fails the suite with mypy's report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_type_errors_and_the_fakes_conform_to_the_protocols():
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", "/tmp/burstd-mypy-cache"],
                       cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, f"mypy found type errors:\n{r.stdout[-20000:]}{r.stderr[-2000:]}"
