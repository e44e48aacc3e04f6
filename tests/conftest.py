"""Shared pytest fixtures.

Everything the tests read lives in the repository (issue 27: a clone stands alone): the Slurm JSON captures in
tests/data/slurm-fixtures, samples of the public workload traces in examples/traces. ``BURSTD_TRACES`` names a
folder of the whole public traces (tests/public_traces.py; docs/testbed.md, "Test data"); set, the trace tests
read those instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from burstd import start_up
from tests import hypothesis_profiles

pytest_plugins = ["tests.bed", "tests.pg"]

REPO = Path(__file__).resolve().parent.parent
#: Slurm 24.11 and 26.05 JSON captured on live clusters (its README.md says how)
FIXTURES = REPO / "tests" / "data" / "slurm-fixtures"
# the public workload traces: tests/public_traces.py (the in-repo samples, or the whole ones under BURSTD_TRACES)
# how hard the property tests search: BURSTD_HYPOTHESIS_PROFILE=ci (default) or deep (tests/hypothesis_profiles.py)
hypothesis_profiles.load()


#: The live test files by the worker seconds they took (setup, call and teardown of all their tests; the run's
#: "slowest files" section prints the figure), longest first, measured 2026-11-28 on a whole `bash .ci/run`.
#: Under xdist (a file to a worker) they are handed out in this order, so no long file starts late and leaves
#: one worker finishing alone on it. A live file not named here follows them, in collection order.
LONGEST_FIRST = ("test_preemption_storm.py", "test_train_torchrun.py", "test_crash_cloud.py",
                 "test_cloud_burst_faults.py", "test_train_survivor.py", "test_crash.py", "test_cloud_burst_loop.py",
                 "test_crash_requeue.py", "test_demo_bed.py", "test_data_live_bed.py", "test_ha_bed.py",
                 "test_ha_failover.py", "test_aws_provider.py", "test_image_vm_bed.py", "test_spot_reclaim_requeue.py",
                 "test_budget_bed.py", "test_gang_launch.py", "test_testbed.py", "test_crash_random.py",
                 "test_cloud_image_bed.py", "test_monitoring_bed.py", "test_data_staging.py", "test_deadman_bed.py",
                 "test_straight_to_cloud_bed.py", "test_slurm_adapter.py", "test_forged_reason_bed.py",
                 "test_cloud_node_up_bed.py", "test_burst_loop.py", "test_connection_flood_bed.py")


def longest_first(items: list) -> list:
    """The live files ranked in ``LONGEST_FIRST`` first, in that order; every other file after them, in collection
    order (the fuzz files, the short live files, then the unit files). Each file's tests stay together.

    Tried and dropped (docs/testbed.md, round ten): spreading the quick files between the live ones. It kept the
    CPU busy mid-run, but the live tests then ran longer under the load, and so did their daemons' and pollers'
    work: the run used 14% more CPU-s and took 2 minutes longer."""
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    return sorted(items, key=rank)  # stable: the rest keep their order


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collection imports every test module and what they import (burstd, moto, hypothesis, schemathesis), each
    worker for itself: without the collector's passes over it (burstd.start_up), and out of the collector's sight
    for the rest of the run. On the xdist controller too, which collects nothing."""
    with start_up.paused():
        return (yield)


def pytest_collection_modifyitems(config, items):
    items[:] = longest_first(items)
    # ``@pytest.mark.torch``: skipped where torch is not installed. The files import torch when their tests run,
    # not at import: every xdist worker imports every file to collect it, and torch with torch.distributed.checkpoint
    # cost each worker 3-5 CPU-s there (docs/testbed.md, round ten).
    if importlib.util.find_spec("torch") is None:
        no_torch = pytest.mark.skip(reason="torch is not installed (pip install 'burstd[train]')")
        for item in items:
            if item.get_closest_marker("torch") is not None:
                item.add_marker(no_torch)
    # A ``release_bed`` test proves something of a 24.11/26.05 bed only: on the host's Slurm it is deselected
    # (run it with BURSTD_BED_SLURM_RELEASE=24.11), so that a skip still means a missing install step.
    if not os.environ.get("BURSTD_BED_SLURM_RELEASE"):
        dropped = [item for item in items if item.get_closest_marker("release_bed") is not None]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item.get_closest_marker("release_bed") is None]


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


#: Worker seconds by test file (setup + call + teardown of every test), gathered where the reports arrive (the
#: xdist controller): the figure ``LONGEST_FIRST`` is ranked by, printed at the end of every run.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if len(_FILE_SECONDS) < 2:
        return
    top = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]
    terminalreporter.section("slowest files (worker seconds, all their tests)")
    for path, seconds in top:
        terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
    terminalreporter.write_line(f"{sum(_FILE_SECONDS.values()):8.1f}s  in all, {len(_FILE_SECONDS)} files")


@pytest.fixture
def open_dir():
    """A folder other users (the bed's job user) can reach: pytest's tmp_path lives under a mode-700 folder."""
    d = Path(tempfile.mkdtemp(prefix="burstd-open-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
