"""ensure_chroot's build steps write into the log it was given (closed afterwards, even when a step fails) or,
without one, into /dev/null; a finished build is renamed into place, a failed one is not."""

import subprocess

import pytest

from burstd.testbed import release
from burstd.testbed.host import BedError


@pytest.fixture
def builds(tmp_path, monkeypatch):
    monkeypatch.setattr(release, "CHROOT_ROOT", tmp_path / "chroots")
    monkeypatch.setattr(release.shutil, "which", lambda name, path=None: f"/usr/sbin/{name}")
    seen: list[object] = []

    def debootstrap(target, suite, out):
        seen.append(out)
        (target / "etc").mkdir(parents=True)
        if not isinstance(out, int):
            out.write(b"debootstrap " + suite.encode() + b"\n")

    monkeypatch.setattr(release, "debootstrap", debootstrap)
    monkeypatch.setattr(release, "run_logged", lambda argv, what, out: seen.append(out))
    return seen


def test_the_build_logs_to_the_file_given_and_closes_it(tmp_path, builds):
    log = tmp_path / "chroot-build.log"
    root = release.ensure_chroot("24.11", log)
    assert root == tmp_path / "chroots" / "trixie"
    assert (root / release.CHROOT_MARK.lstrip("/")).read_text().startswith("burstd test bed chroot: Slurm 24.11")
    assert builds[0] is builds[1] and builds[0].closed
    assert log.read_bytes() == b"debootstrap trixie\n"
    assert release.ensure_chroot("24.11", log) == root and len(builds) == 2  # built once


def test_without_a_log_the_build_writes_to_devnull(builds):
    release.ensure_chroot("26.05")
    assert builds == [subprocess.DEVNULL, subprocess.DEVNULL]


def test_a_failed_build_closes_its_log_and_is_not_put_in_place(tmp_path, builds, monkeypatch):
    def fail(argv, what, out):
        builds.append(out)
        raise BedError(f"{what} failed")

    monkeypatch.setattr(release, "run_logged", fail)
    with pytest.raises(BedError, match="install Slurm in the trixie chroot failed"):
        release.ensure_chroot("24.11", tmp_path / "chroot-build.log")
    assert builds[0].closed
    assert not (tmp_path / "chroots" / "trixie").exists() and (tmp_path / "chroots" / "trixie.partial").is_dir()
