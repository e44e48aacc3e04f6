"""The local provider's image: the command plan (debootstrap of the release's suite, then install.sh in a chroot),
and the build's own checks, with debootstrap and the chroot faked (the real build needs root, the Debian mirror and
minutes; docs/clouds.md gives the command).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burstd.image import rootfs
from burstd.image.recipe import MARK, STAGE_IN_IMAGE, ImageBuildFailed, ImageError, stage_files, target
from burstd.image.spec import ImageSpec
from burstd.testbed import release

SPEC = ImageSpec(slurm_release="24.11")


def test_plan_debootstraps_the_releases_suite_and_runs_the_recipe_in_a_chroot(tmp_path):
    p = rootfs.plan(tmp_path / "img", target(SPEC, "local", None))
    assert p.suite == "trixie" and p.rootfs == (tmp_path / "img" / "rootfs").resolve()
    assert p.install_argv[:2] == ["chroot", str(p.rootfs)]
    assert p.install_argv[-2:] == [f"{STAGE_IN_IMAGE}/install.sh", STAGE_IN_IMAGE]
    assert "-i" in p.install_argv  # a clean environment: nothing of the caller's leaks into the image
    assert rootfs.plan(tmp_path, target(SPEC, "local", "22.05")).suite == "bookworm"
    with pytest.raises(ImageError, match="local provider"):
        rootfs.plan(tmp_path, target(SPEC, "aws", None))


class FakeDebian:
    """debootstrap and the chroot run, as burstd.testbed.release offers them (same signatures)."""

    def __init__(self, plan: rootfs.RootfsPlan, *, removes_key: bool = True):
        self.plan = plan
        self.removes_key = removes_key
        self.calls: list[str] = []

    def debootstrap(self, target: Path, suite: str, out) -> None:
        assert (target, suite) == (self.plan.rootfs, self.plan.suite)
        (target / "usr/bin").mkdir(parents=True)
        (target / "usr/bin/apt-get").write_text("")
        self.calls.append("debootstrap")

    def run_logged(self, argv: list[str], what: str, out, log_name: str = "") -> None:
        assert argv == self.plan.install_argv and log_name == str(self.plan.log)
        staged = sorted(p.name for p in self.plan.stage.iterdir())
        assert staged == ["burstd-0.1.0-py3-none-any.whl", "burstd-agent.service", "install.sh",
                          "node-bootstrap.sh"]
        # what munge's package does, and what install.sh's last steps undo and record
        (self.plan.rootfs / "etc/munge").mkdir(parents=True)
        (self.plan.rootfs / "etc/munge/munge.key").write_bytes(b"k" * 32)
        if self.removes_key:
            (self.plan.rootfs / "etc/munge/munge.key").unlink()
        (self.plan.rootfs / MARK.lstrip("/")).write_text(json.dumps({"slurm_release": "24.11"}))
        self.calls.append("install.sh")


@pytest.fixture
def wheel(tmp_path):
    path = tmp_path / "burstd-0.1.0-py3-none-any.whl"
    path.write_bytes(b"PK")
    return path


def _build(tmp_path, wheel, monkeypatch, **fake_kw):
    tgt = target(SPEC, "local", None)
    p = rootfs.plan(tmp_path / "img", tgt)
    fake = FakeDebian(p, **fake_kw)
    monkeypatch.setattr(release, "debootstrap", fake.debootstrap)
    monkeypatch.setattr(release, "run_logged", fake.run_logged)
    return p, fake, lambda: rootfs.build(p, stage_files(SPEC, tgt), wheel)


def test_build_stages_runs_unstages_and_keeps_a_record(tmp_path, wheel, monkeypatch):
    p, fake, run = _build(tmp_path, wheel, monkeypatch)
    assert run() == p.rootfs
    assert fake.calls == ["debootstrap", "install.sh"]
    assert not p.stage.exists()  # nothing of the build stays in the image
    assert (p.out_dir / "files" / "install.sh").read_text().startswith("#!/bin/bash")


def test_build_refuses_an_image_that_kept_a_munge_key(tmp_path, wheel, monkeypatch):
    _, _, run = _build(tmp_path, wheel, monkeypatch, removes_key=False)
    with pytest.raises(ImageBuildFailed, match="etc/munge/munge.key"):
        run()


def test_leaked_secrets_lists_each_credential_path(tmp_path):
    assert rootfs.leaked_secrets(tmp_path) == []
    (tmp_path / "etc/burstd").mkdir(parents=True)
    (tmp_path / "etc/burstd/agent.token").write_text("t")
    assert rootfs.leaked_secrets(tmp_path) == ["etc/burstd/agent.token"]
