"""ensure_chroot's build steps (also run ahead of a bed by `burstctl testbed chroot`) write into the log it was
given (closed afterwards, even when a step fails) or, without one, into /dev/null; a finished build is renamed
into place, a failed one is not."""

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
    monkeypatch.setattr(release, "run_logged", lambda argv, what, out, log_name: seen.append(out))
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
    def fail(argv, what, out, log_name):
        builds.append(out)
        raise BedError(f"{what} failed; see {log_name}")

    monkeypatch.setattr(release, "run_logged", fail)
    log = tmp_path / "chroot-build.log"
    with pytest.raises(BedError, match=f"install Slurm in the trixie chroot failed; see {log}"):  # the log it wrote
        release.ensure_chroot("24.11", log)
    assert builds[0].closed
    assert not (tmp_path / "chroots" / "trixie").exists() and (tmp_path / "chroots" / "trixie.partial").is_dir()


def test_burstctl_testbed_chroot_builds_once_and_says_where(tmp_path, builds):
    import json

    from typer.testing import CliRunner

    from burstd.cli.app import app

    first = CliRunner().invoke(app, ["testbed", "chroot", "--slurm-release", "26.05", "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output) == {"slurm_release": "26.05", "chroot": str(tmp_path / "chroots" / "sid"),
                                        "built_now": True}
    assert (tmp_path / "chroots" / "26.05-build.log").read_bytes() == b"debootstrap sid\n"
    again = CliRunner().invoke(app, ["testbed", "chroot", "--slurm-release", "26.05"])
    assert again.exit_code == 0 and again.output.strip() == str(tmp_path / "chroots" / "sid")
    assert len(builds) == 2  # built once


def test_burstctl_testbed_chroot_refuses_the_hosts_release(builds):
    from typer.testing import CliRunner

    from burstd.cli.app import app

    r = CliRunner().invoke(app, ["testbed", "chroot", "--slurm-release", "22.05"])
    assert r.exit_code == 2 and "one of 24.11, 26.05" in r.output and not builds
