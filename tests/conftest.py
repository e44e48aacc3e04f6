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


#: The longest test files (pytest --durations: each several minutes). Under xdist (a file to a worker) they are
#: handed out first, so the short files fill in around them instead of one worker finishing alone on a long one.
LONGEST_FIRST = ("test_preemption_storm.py", "test_cloud_burst_loop.py", "test_preemption.py", "test_crash.py",
                 "test_demo_bed.py", "test_ha_bed.py", "test_train_torchrun.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


def pytest_sessionfinish(session, exitstatus):
    """``BURSTD_TEST_NO_SKIPS=1`` (set by scripts/test.sh, which installs every part first): a skipped test is a
    failure, because there a skip means an install step went wrong (no Slurm, no PostgreSQL, no torch...)."""
    if os.environ.get("BURSTD_TEST_NO_SKIPS", "0") in ("", "0") or exitstatus != pytest.ExitCode.OK:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reporter.write_line(f"BURSTD_TEST_NO_SKIPS: {len(skipped)} skipped; scripts/test.sh installed every part, so "
                            "a skip here means something it needs is missing (the skip reasons are in the summary)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
