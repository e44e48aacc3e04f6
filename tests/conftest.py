"""Shared pytest fixtures.

Paths to the read-only shared material (fixtures, traces) live beside the repository in ../shared.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.bed", "tests.pg"]

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BURSTD_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "slurm"
TRACES = SHARED / "traces"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared material not found at {SHARED} (set BURSTD_SHARED)")
    return SHARED
