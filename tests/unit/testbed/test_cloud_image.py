"""The bed's cloud VMs from a node image (testbed/cloud_image.py) and the image cache (image/cache.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from burstd.config import parse_config
from burstd.image import cache, rootfs
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


def _fake_layer(calls):
    """burstd_layer's effect without a chroot: the base's files, linked, and this burstd's stand-in."""
    def layer(base: Path, out: Path, venvs, stale: bool):
        calls.append((out.parent.name, venvs, stale))
        rootfs.relink(base, out)
        (out / "opt").mkdir(exist_ok=True)
        (out / "opt" / "burstd-of-this-tree").write_text(cache.source_digest())
    return layer


@pytest.fixture
def source(monkeypatch):
    """This burstd's digest, which the test changes as an edit to burstd's code would."""
    digest = {"now": "a" * 12}
    monkeypatch.setattr(cache, "source_digest", lambda package=None: digest["now"])
    return digest


def test_an_image_is_built_once_per_spec_and_kept(tmp_path, source):
    calls: list = []
    layers: list = []
    spec = ImageSpec(slurm_release="22.05", torch=False)
    first = cache.ensure(spec, "22.05", tmp_path, build=_fake_build(calls), layer=_fake_layer(layers))
    again = cache.ensure(spec, "22.05", tmp_path, build=_fake_build(calls), layer=_fake_layer(layers))
    assert first == again and cache.is_built(first) and len(calls) == 1 and len(layers) == 1
    assert calls[0][1].endswith(".partial") and not first.with_name(first.name + ".partial").exists()
    other = cache.ensure(ImageSpec(slurm_release="22.05", torch=False, python_packages=["six==1.16.0"]), "22.05",
                         tmp_path, build=_fake_build(calls), layer=_fake_layer(layers))
    assert other != first and len(calls) == 2  # another spec is another image
    assert first.name.startswith("22.05-") and first.name.endswith(".burstd-" + "a" * 12)


def test_a_changed_burstd_is_a_new_layer_over_the_same_base_and_the_base_is_never_touched(tmp_path, source):
    calls: list = []
    layers: list = []
    spec = ImageSpec(slurm_release="22.05", torch=False)
    first = cache.ensure(spec, "22.05", tmp_path, build=_fake_build(calls), layer=_fake_layer(layers))
    base = cache.base_dir(spec, "22.05", tmp_path)
    # the base was built from this very burstd: the layer only links it
    assert layers == [(first.name + ".partial", ("/opt/burstd/agent", "/opt/burstd/jobenv"), False)]
    source["now"] = "b" * 12  # an edit to burstd
    second = cache.ensure(spec, "22.05", tmp_path, build=_fake_build(calls), layer=_fake_layer(layers))
    assert second != first and second.name == f"{base.name}.burstd-{'b' * 12}"
    assert len(calls) == 1  # the base is not built again
    assert layers[-1][2] is True  # the base holds another burstd: this one goes in
    assert (second / "rootfs/opt/burstd-of-this-tree").read_text() == "b" * 12
    assert not (base / "rootfs/opt/burstd-of-this-tree").exists()
    assert (second / "rootfs" / MARK.lstrip("/")).stat().st_ino == (base / "rootfs" / MARK.lstrip("/")).stat().st_ino
    assert cache.is_built(first)  # a recent layer stays: another checkout's VMs may boot from it


def test_layers_unused_for_a_day_are_removed_when_another_is_made(tmp_path, source):
    import os
    import time

    spec = ImageSpec(slurm_release="22.05", torch=False)
    kw = {"build": _fake_build([]), "layer": _fake_layer([])}
    old = cache.ensure(spec, "22.05", tmp_path, **kw)
    source["now"] = "c" * 12
    recent = cache.ensure(spec, "22.05", tmp_path, **kw)
    day_ago = time.time() - cache.LAYER_UNUSED_S - 60
    os.utime(old, (day_ago, day_ago))
    source["now"] = "d" * 12
    current = cache.ensure(spec, "22.05", tmp_path, **kw)
    assert not old.exists() and not (tmp_path / f".{old.name}.lock").exists()
    assert cache.is_built(recent) and cache.is_built(current) and cache.is_built(cache.base_dir(spec, "22.05", tmp_path))


def test_a_layer_that_fails_leaves_no_image_and_is_made_again_next_time(tmp_path, source):
    spec = ImageSpec(slurm_release="22.05", torch=False)

    def broken(base, out, venvs, stale):
        rootfs.relink(base, out)
        raise rootfs.ImageBuildFailed("pip failed")

    with pytest.raises(rootfs.ImageBuildFailed):
        cache.ensure(spec, "22.05", tmp_path, build=_fake_build([]), layer=broken)
    assert not cache.is_built(cache.image_dir(spec, "22.05", tmp_path))
    assert cache.is_built(cache.ensure(spec, "22.05", tmp_path, build=_fake_build([]), layer=_fake_layer([])))


def test_a_relinked_image_shares_files_until_one_is_given_its_own(tmp_path):
    base = tmp_path / "base"
    (base / "venv/lib").mkdir(parents=True)
    (base / "venv/lib/mod.py").write_text("old\n")
    (base / "usr").mkdir()
    (base / "usr/tool").write_text("tool\n")
    (base / "usr").chmod(0o1777)
    out = tmp_path / "layer" / "rootfs"
    rootfs.relink(base, out)
    assert (out / "usr/tool").stat().st_ino == (base / "usr/tool").stat().st_ino
    assert (out / "usr").stat().st_mode & 0o7777 == 0o1777  # directories keep their modes (munge checks them)
    rootfs._own_inodes(out / "venv")
    (out / "venv/lib/mod.py").write_text("new\n")  # what pip writes in place can never reach the base
    assert (base / "venv/lib/mod.py").read_text() == "old\n"
    with pytest.raises(rootfs.ImageBuildFailed, match="could not link"):
        rootfs.relink(tmp_path / "missing", tmp_path / "elsewhere")


def test_the_source_digest_follows_burstds_files_not_its_bytecode(tmp_path):
    pkg = tmp_path / "burstd"
    (pkg / "agent/__pycache__").mkdir(parents=True)
    (pkg / "agent/deadman.py").write_text("x = 1\n")
    first = cache.source_digest(pkg)
    (pkg / "agent/__pycache__/deadman.cpython-311.pyc").write_bytes(b"\0")
    assert cache.source_digest(pkg) == first
    (pkg / "agent/deadman.py").write_text("x = 2\n")
    assert cache.source_digest(pkg) != first


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
    before = cache.base_dir(spec, "22.05", tmp_path)
    monkeypatch.setattr(cache, "stage_files", lambda s, t: {"install.sh": "#!/bin/bash\necho changed\n"})
    after = cache.base_dir(spec, "22.05", tmp_path)
    assert before != after and before.name.rsplit("-", 1)[0] == after.name.rsplit("-", 1)[0]


def test_changed_requirements_are_another_base(tmp_path, monkeypatch):
    spec = ImageSpec(slurm_release="22.05", torch=False)
    before = cache.base_dir(spec, "22.05", tmp_path)
    monkeypatch.setattr(cache, "_requirements", lambda: ["httpx>=99"])  # install.sh would install other packages
    assert cache.base_dir(spec, "22.05", tmp_path) != before


def test_a_cached_images_path_is_one_a_vm_and_the_bed_accept(tmp_path):
    """The layer's name reaches VmRoot's and the bed's path checks (a '+' there once failed every image VM)."""
    from burstd.providers.local import vmroot

    folder = cache.image_dir(ImageSpec(slurm_release="22.05", torch=False), "22.05", Path("/var/lib/burstd-testbed"))
    vmroot.VmRoot(image=str(folder / "rootfs"), vm_dir=str(tmp_path / "vm"))
    BedConfig(cloud_image=str(folder))
