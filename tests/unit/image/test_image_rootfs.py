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
from burstd.image import debian

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
    """debootstrap and the chroot run, as burstd.image.debian offers them (same signatures)."""

    def __init__(self, plan: rootfs.RootfsPlan, *, removes_key: bool = True, build_env: tuple[str, ...] = ()):
        self.plan = plan
        self.removes_key = removes_key
        self.build_env = build_env
        self.calls: list[str] = []
        self.staged: list[str] = []
        self.argv: list[str] = []

    def debootstrap(self, target: Path, suite: str, out, *, failed) -> None:
        assert (target, suite) == (self.plan.rootfs, self.plan.suite) and failed is ImageBuildFailed
        (target / "usr/bin").mkdir(parents=True)
        (target / "usr/bin/apt-get").write_text("")
        self.calls.append("debootstrap")

    def run_logged(self, argv: list[str], what: str, out, log_name: str = "", *, failed) -> None:
        expected = rootfs.RootfsPlan(self.plan.out_dir, self.plan.suite, self.build_env).install_argv
        assert argv == expected and log_name == str(self.plan.log) and failed is ImageBuildFailed
        self.argv = argv
        self.staged = sorted(p.name for p in self.plan.stage.iterdir())
        assert {"burstd-0.1.0-py3-none-any.whl", "burstd-agent.service", "install.sh",
                "node-bootstrap.sh"} <= set(self.staged)
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
    for name in (*rootfs.PIP_PASSTHROUGH, "PIP_CERT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(rootfs, "host_pip_ca", lambda environ: None)
    tgt = target(SPEC, "local", None)
    p = rootfs.plan(tmp_path / "img", tgt)
    fake = FakeDebian(p, **fake_kw)
    monkeypatch.setattr(debian, "debootstrap", fake.debootstrap)
    monkeypatch.setattr(debian, "run_logged", fake.run_logged)
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


def test_build_inherits_the_hosts_pip_trust_and_index_but_bakes_nothing_in(tmp_path, wheel, monkeypatch):
    """Behind a TLS-inspecting proxy or with a site index, pip inside the chroot needs the host's settings; the CA
    bundle is staged for the build only, and nothing else of the caller's environment reaches install.sh."""
    ca = tmp_path / "site-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    tgt = target(SPEC, "local", None)
    p = rootfs.plan(tmp_path / "img", tgt)
    monkeypatch.setenv("PIP_CERT", str(ca))
    monkeypatch.setenv("PIP_INDEX_URL", "https://pypi.example.org/simple")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-the-chroot")
    for name in set(rootfs.PIP_PASSTHROUGH) - {"PIP_INDEX_URL"}:
        monkeypatch.delenv(name, raising=False)
    env = ("PIP_INDEX_URL=https://pypi.example.org/simple", f"PIP_CERT={STAGE_IN_IMAGE}/{rootfs.PIP_CA_IN_STAGE}")
    fake = FakeDebian(p, build_env=env)
    monkeypatch.setattr(debian, "debootstrap", fake.debootstrap)
    monkeypatch.setattr(debian, "run_logged", fake.run_logged)
    rootfs.build(p, stage_files(SPEC, tgt), wheel)
    assert rootfs.PIP_CA_IN_STAGE in fake.staged  # there while install.sh ran
    assert not p.stage.exists()  # and gone with the stage
    assert not any("AWS_SECRET" in a for a in fake.argv) and env[0] in fake.argv


def test_the_hosts_pip_ca_comes_from_the_environment_or_pip_conf(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\ncert = {ca}\n")
    assert rootfs.host_pip_ca({"PIP_CERT": str(ca)}, tmp_path / "none.conf") == ca
    assert rootfs.host_pip_ca({}, conf) == ca
    assert rootfs.host_pip_ca({}, tmp_path / "none.conf") is None
    conf.write_text("[global\ncert")  # a broken pip.conf is pip's problem, not a build failure here
    assert rootfs.host_pip_ca({}, conf) is None
    assert rootfs.host_pip_ca({"PIP_CERT": str(tmp_path / "missing.pem")}, tmp_path / "none.conf") is None


def test_a_failed_step_raises_the_callers_error_naming_the_step_and_the_log(tmp_path):
    with open(tmp_path / "build.log", "ab") as out, pytest.raises(ImageBuildFailed) as err:
        debian.run_logged(["false", "--step"], "the recipe", out, log_name="DIR/build.log", failed=ImageBuildFailed)
    assert str(err.value) == "the recipe: `false --step ...` failed (exit 1); see DIR/build.log"
