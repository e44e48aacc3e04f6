"""The bed's cloud VMs from a node image (testbed/cloud_image.py) and the image cache (image/cache.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from burstd.config import parse_config
from burstd.image import cache
from burstd.image.recipe import MARK
from burstd.image.spec import ImageSpec
from burstd.testbed import cloud_image, release, render
from burstd.testbed.config import BedConfig
from burstd.testbed.host import BedError


def _fake_build(calls):
    def build(spec, tgt, out_dir: Path):
        calls.append((tgt.slurm_release, out_dir.name))
        (out_dir / "rootfs" / "etc").mkdir(parents=True, exist_ok=True)
        (out_dir / "rootfs" / MARK.lstrip("/")).write_text(json.dumps({"slurm_release": tgt.slurm_release}))
    return build


def test_an_image_is_built_once_per_spec_and_kept(tmp_path):
    calls: list = []
    spec = ImageSpec(slurm_release="22.05", torch=False)
    first = cache.ensure(spec, "22.05", tmp_path, build=_fake_build(calls))
    again = cache.ensure(spec, "22.05", tmp_path, build=_fake_build(calls))
    assert first == again and cache.is_built(first) and len(calls) == 1
    assert calls[0][1].endswith(".partial") and not first.with_name(first.name + ".partial").exists()
    other = cache.ensure(ImageSpec(slurm_release="22.05", torch=False, python_packages=["six==1.16.0"]), "22.05",
                         tmp_path, build=_fake_build(calls))
    assert other != first and len(calls) == 2  # another spec is another image
    assert first.name.startswith("22.05-")


def test_a_build_that_leaves_no_image_is_not_cached(tmp_path):
    with pytest.raises(RuntimeError, match="without"):
        cache.ensure(ImageSpec(slurm_release="24.11"), "24.11", tmp_path, build=lambda *a: None)
    assert not any(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.endswith(".partial"))


def test_without_an_image_the_cloud_vms_share_the_head_as_before(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path)).resolved()
    assert render.vm_spec(cfg, "cloud1", boot_flag=True).root is None
    assert cloud_image.burstd_local_keys(cfg) == {}


def test_with_an_image_only_the_cloud_nodes_boot_from_it_gated_on_the_heads_fingerprint(tmp_path):
    img = tmp_path / "img"
    cfg = BedConfig(state_dir=str(tmp_path / "s"), cloud_image=str(img)).resolved()
    cloud = render.vm_spec(cfg, "cloud1", boot_flag=True)
    assert cloud.root is not None and cloud.root.image == f"{img}/rootfs" and cloud.slurmd == "/usr/sbin/slurmd"
    assert cloud.root.vm_dir == f"{tmp_path}/s/vms/{cfg.netns_of('cloud1')}.vm"
    assert cloud.root.parity_reference == f"{tmp_path}/s/parity-reference.json"
    assert "burstuser" in cloud.root.users and f"{tmp_path}/s/spool" in cloud.root.make_dirs
    assert render.vm_spec(cfg, "onprem1", boot_flag=False).root is None
    script = render.hook_script(cfg, "resume", "bare")
    assert "mount -t overlay" in script and f"rm -rf {cloud.root.vm_dir}" in script

    local = parse_config(tomllib.loads(render.burstd_toml(cfg))).pool("local").local
    assert local.image_rootfs == f"{img}/rootfs" and local.slurmd_path == "/usr/sbin/slurmd"
    assert local.parity_reference_file == f"{tmp_path}/s/parity-reference.json"


def test_the_gate_files_hold_the_heads_facts_and_the_beds_allowed_differences(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), cloud_image="default").resolved()
    cloud_image.write_gate_files(cfg, measure=lambda job_python: {"slurm.release": "22.05.8", "py": job_python})
    reference, spec = cloud_image.gate_files(tmp_path)
    assert json.loads(reference.read_text()) == {"slurm.release": "22.05.8", "py": "/usr/bin/python3"}
    parity = tomllib.loads(spec.read_text())["parity"]
    assert parity["allow"] == list(cloud_image.BED_ALLOW) and parity["job_python"] == cloud_image.JOB_PYTHON


def test_a_chroot_bed_gates_its_vms_on_the_chroots_fingerprint(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), slurm_release="24.11", cloud_image="/img").resolved()
    root = render.vm_spec(cfg, "cloud1", boot_flag=True).root
    assert root is not None and root.parity_reference == f"{tmp_path}/parity-reference.json"
    assert root.munge_key.endswith("/chroots/trixie/etc/munge/munge.key")
    measured = []
    cloud_image.write_gate_files(cfg, measure=lambda **kw: pytest.fail("the head measured"),
                                 measure_chroot=lambda path: measured.append(path) or {"slurm.release": "24.11.5"})
    assert [str(p) for p in measured] == [str(release.chroot_path("24.11"))]
    reference, _ = cloud_image.gate_files(tmp_path)
    assert json.loads(reference.read_text()) == {"slurm.release": "24.11.5"}


def test_a_chroots_fingerprint_runs_its_commands_in_the_chroot(tmp_path, monkeypatch):
    from burstd.agent import fingerprint

    root = tmp_path / "chroot"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\n')
    (root / "usr/lib/x86_64-linux-gnu/slurm-wlm").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/slurm-wlm/auth_munge.so").write_text("")
    ran = []

    def run(argv, timeout_s=10.0):
        ran.append(list(argv))
        out = {"slurmd": "slurm 24.11.5\n", "munged": "munge-0.5.16 (2024-05-27)\n"}.get(argv[2], "")
        return (0, out) if argv[3] == "-V" else (1, "")

    monkeypatch.setattr(fingerprint, "run", run)
    facts = cloud_image.chroot_fingerprint(root)
    assert facts == {"os.release": "Debian GNU/Linux 13 (trixie)", "slurm.release": "24.11.5",
                     "slurm.plugin.auth_munge": "present", "munge.version": "0.5.16"}
    assert all(argv[:2] == ["chroot", str(root)] for argv in ran), ran


def test_a_folder_that_is_no_image_is_refused_naming_it(tmp_path):
    cfg = BedConfig(state_dir=str(tmp_path), cloud_image=str(tmp_path / "nothing")).resolved()
    with pytest.raises(BedError, match=f"--cloud-image {tmp_path}/nothing: no "):
        cloud_image.ensure_image(cfg)


@pytest.mark.parametrize("bad", ["relative", "/a b", "/x;rm"])
def test_a_bad_cloud_image_setting_is_refused(bad):
    with pytest.raises(ValidationError, match="cloud_image"):
        BedConfig(cloud_image=bad)


def test_a_changed_recipe_is_another_image(tmp_path, monkeypatch):
    spec = ImageSpec(slurm_release="22.05", torch=False)
    before = cache.image_dir(spec, "22.05", tmp_path)
    monkeypatch.setattr(cache, "stage_files", lambda s, t: {"install.sh": "#!/bin/bash\necho changed\n"})
    after = cache.image_dir(spec, "22.05", tmp_path)
    assert before != after and before.name.rsplit("-", 1)[0] == after.name.rsplit("-", 1)[0]
