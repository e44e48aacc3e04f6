"""pytest plugin: the live Slurm test bed, once per session (``pytest_plugins = ["tests.bed"]``).

    @pytest.mark.bed
    def test_something(slurm_bed):
        job = slurm_bed.sbatch(["-p", "onprem"], "#!/bin/sh\\nhostname\\n", user="burstuser")
        slurm_bed.wait_for(lambda: slurm_bed.job(job).get("JobState") == "COMPLETED", 60, "job to complete")

Settings come from ``BURSTD_BED_<FIELD>`` variables (any field of ``burstd.testbed.config.BedConfig``), so
several people can run separate beds on one machine: e.g. ``BURSTD_BED_NAME=mine BURSTD_BED_SLOT=7``. The hook
mode defaults to ``stub``; a test switches it with ``@pytest.mark.bed_hooks("bare")`` or
``with slurm_bed.hooks("bare"): ...`` (or "burstd"), or the whole session with ``BURSTD_BED_HOOKS``.
``BURSTD_BED_KEEP=1`` leaves the bed up after the session (faster reruns; a later session reuses it when the
settings match).

The bed's SuspendTime defaults to 10 s here (``BURSTD_BED_SUSPEND_TIME`` overrides) and cred_expire to 10 s
(a requeued job waits cred_expire + 1 s), to keep tests short; ResumeTimeout to 180 s, so a loaded machine's
slow relaunch is not a boot failure. Under ``pytest -n N`` (pytest-xdist, as
``scripts/test.sh`` runs the suite) worker ``gwK`` gets a bed of its own: name ``<name>-wK``, slot + K.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

TEST_USER = "burstuser"
OTHER_USER = "burstuser2"


def bed_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm test bed needs root (network namespaces, slurmd)"
    from burstd.testbed.bed import missing_software

    missing = missing_software()
    if missing and not os.environ.get("BURSTD_BED_INSTALL"):
        return (f"Slurm test bed software missing ({', '.join(missing)}); "
                "run scripts/install-deps.sh as root (or set BURSTD_BED_INSTALL=1 to let the fixture run it)")
    if shutil.which("ip") is None:
        return "iproute2 (ip) is missing"
    return None


@pytest.fixture(scope="session")
def slurm_bed():
    """A running :class:`burstd.testbed.Bed` (skips with the reason when this machine cannot run one)."""
    reason = bed_skip_reason()
    if reason:
        pytest.skip(reason)
    from burstd.testbed import Bed, BedConfig

    # short power-saving timers, and requeued jobs eligible again after 11 s instead of 31 (cred_expire + 1).
    # ResumeTimeout long: a namespace VM boots in seconds, but a test that kills and restarts burstd mid-launch
    # takes a minute or more on a loaded 2-core machine, and Slurm would then fail the boot (rightly) and
    # requeue the job under the test. No test here waits on Slurm's timer; burstd's own boot_timeout_s is tested.
    defaults = {"suspend_time": 10, "suspend_timeout": 10, "cred_expire": 10, "resume_timeout": 180}
    env_overrides = {k: v for k, v in defaults.items()
                     if not os.environ.get(f"BURSTD_BED_{k.upper()}")}
    bed = Bed(BedConfig.from_env(**(env_overrides | worker_bed_identity()._asdict())))
    bed.up(install=bool(os.environ.get("BURSTD_BED_INSTALL")))
    _SESSION_BED.append(bed)
    # several pytest sessions may share one bed: the last one out brings it down
    sessions = bed.state_dir / "sessions"
    sessions.mkdir(exist_ok=True)
    mine = sessions / str(os.getpid())
    mine.touch()
    try:
        yield bed
    finally:
        mine.unlink(missing_ok=True)
        others = [p for p in sessions.iterdir() if p.name.isdigit() and Path(f"/proc/{p.name}").exists()]
        if not others and not os.environ.get("BURSTD_BED_KEEP"):
            bed.down()


class BedIdentity(NamedTuple):
    name: str
    slot: int


def worker_bed_identity() -> BedIdentity:
    """This worker's bed name and slot. Under ``pytest -n`` each worker gets a bed of its own (name, subnet,
    ports) beside worker 0's; a test's side bed takes ``slot + offset`` of *this*, never of the environment's
    base slot, or two workers bring up side beds on one subnet."""
    from burstd.testbed import BedConfig

    base = BedConfig.from_env()
    worker = _xdist_worker()
    if not worker:
        return BedIdentity(base.name, base.slot)
    return BedIdentity(f"{base.name[:8]}-w{worker}", base.slot + worker)


def _xdist_worker() -> int:
    """This process's pytest-xdist worker number (``gw3`` -> 3); 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def pytest_configure(config):
    config.addinivalue_line("markers", "bed_hooks(mode): run the test with the bed's hooks in this mode "
                            "(stub | bare | burstd), restored afterwards")


@pytest.fixture(autouse=True)
def _bed_hooks_marker(request):
    """``@pytest.mark.bed_hooks("burstd")`` switches the live bed's hooks for one test."""
    marker = request.node.get_closest_marker("bed_hooks")
    if marker is None:
        yield
        return
    bed = request.getfixturevalue("slurm_bed")
    with bed.hooks(marker.args[0]):
        yield


@pytest.fixture(autouse=True)
def _bed_jobs_cancelled_after_test(request):
    """Jobs a test leaves behind (a failed assertion mid-story) must not leak into the next test on the
    shared session bed: cancel every job still in the queue when a bed test ends."""
    yield
    if "slurm_bed" not in request.fixturenames:
        return
    _BED_USED.add(request.module.__name__)
    bed = request.getfixturevalue("slurm_bed")
    left = bed.run(["squeue", "-h", "-o", "%A"], check=False).stdout.split()
    if left:
        bed.run(["scancel", *left], check=False)


_SESSION_BED: list = []  # the session's bed once a test has asked for it
_BED_USED: set = set()  # non-empty once a test of the current module used the bed


@pytest.fixture(scope="module", autouse=True)
def _bed_cloud_gate_reset_after_module():
    """burstd's cloud gate outlives its daemon by design (the rule holds while it is down): its reservation over
    the cloud nodes lists the accounts that may burst, and the cloud partition's account lists. A module whose
    daemon ran without ``daemon_bed.running_daemon`` (which resets them itself) would leave its budgets' rule on
    the bed for the next module's bare jobs: take it away once the module's own fixtures are down."""
    _BED_USED.clear()
    yield
    if _SESSION_BED and _BED_USED:
        reset_cloud_gate(_SESSION_BED[0])


def reset_cloud_gate(bed, partitions: Sequence[str] = (), wait_s: float = 30.0) -> list[str]:
    """Delete every ``burstd_*`` reservation and give the cloud partitions (default: the bed's) back their
    slurm.conf account lists. Returns the reservations still there (``delete_burstd_reservations``)."""
    left = delete_burstd_reservations(bed, wait_s)
    for partition in partitions or (bed.cloud_partition,):
        bed.run(["scontrol", "update", f"PartitionName={partition}", "AllowAccounts=ALL", "DenyAccounts="],
                check=False)
    return left


def delete_burstd_reservations(bed, wait_s: float = 30.0) -> list[str]:
    """Delete every ``burstd_*`` reservation, retried while a cancelled job still ends in it (Slurm refuses to
    delete a reservation a job runs in). One left behind is not harmless: the next daemon cannot create its
    own, and a job started in the old one gets the reservation's end as its time limit, a year for
    ``Duration=infinite``, which no test budget funds (a probe job waited 240 s for that under load).
    Returns the names still there after ``wait_s``: a test about to start on the bed fails on them."""
    def listed() -> list[str]:
        listing = bed.run(["scontrol", "show", "reservation", "-o"], check=False).stdout
        return re.findall(r"ReservationName=(burstd_\S+)", listing)

    deadline = time.monotonic() + wait_s
    names = listed()
    while names and time.monotonic() <= deadline:
        for name in names:
            bed.run(["scontrol", "delete", f"ReservationName={name}"], check=False)
        names = listed()  # what is there after the deletes, never before them
        if names:
            time.sleep(0.5)
    return names


@pytest.fixture
def bed_user() -> str:
    """The normal (non-root) user jobs are submitted as."""
    return TEST_USER


@pytest.fixture
def other_user() -> str:
    """A second non-root uid, for permission tests."""
    return OTHER_USER
