"""An image VM's boot (providers/local/vmroot.py): what it mounts and hands in, checked without booting one (the
live boot is tests/integration/test_image_vm_bed.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from burstd.config import parse_config
from burstd.providers.local import netns, vmroot
from burstd.providers.local.provider import LocalProvider


def _root(tmp_path: Path, **kw) -> vmroot.VmRoot:
    return vmroot.VmRoot(image=str(tmp_path / "img" / "rootfs"), vm_dir=str(tmp_path / "vm"), **kw)


def _spec(root: vmroot.VmRoot | None, **kw) -> netns.VmSpec:
    return netns.VmSpec(netns="sl-cloud1", node_name="cloud1", address="10.77.0.101/24", bridge="br-slurm",
                        conf_server="10.77.0.1:6817", root=root, **kw)


def test_an_image_vm_boots_in_its_own_mount_namespace_and_runs_the_images_slurmd(tmp_path):
    root = _root(tmp_path, users=("burstuser",), make_dirs=("/var/spool/slurmd",))
    argv = netns.start_argv(_spec(root))
    # the network namespace is entered without a hostname wrapper: the boot makes its own UTS namespace
    assert argv[:2] == ["nsenter", "--net=/run/netns/sl-cloud1"]
    # the start waits for the VM's verdict; unshare's argv follows the VM's folder
    assert argv[2:4] == ["sh", "-c"] and argv[4] == vmroot.start_script() and argv[5] == root.vm_dir
    assert argv[6:13] == ["--mount", "--uts", "--pid", "--fork", "--propagation", "private", "--"]
    script = argv[15]
    assert "mount -t overlay overlay" in script and 'lowerdir=$img,upperdir=$vm/upper' in script
    assert 'exec chroot "$r"' in script
    positional = argv[16:]
    assert positional[:10] == ["boot", root.image, root.vm_dir, "cloud1", "/etc/munge/munge.key", "burstuser",
                               "/var/spool/slurmd", "", "", "0"]
    assert positional[10:] == ["/usr/sbin/slurmd", "-b", "-N", "cloud1", "--conf-server", "10.77.0.1:6817"]
    for text in (script, vmroot.inner_script(), vmroot.start_script()):
        assert subprocess.run(["sh", "-n", "-c", text], check=False).returncode == 0


def test_the_vm_has_a_pid_namespace_and_a_proc_of_its_own_and_an_init_that_outlives_the_boot():
    assert 'mount -t proc -o nosuid,nodev,noexec proc "$r/proc"' in vmroot._BOOT
    assert "--rbind /proc" not in vmroot._BOOT  # the head's /proc (slurmctld, the daemon) never enters a VM
    inner = vmroot.inner_script()
    # the VM is up once slurmd started; then the boot's PID 1 becomes the VM's init, reaping orphans
    assert inner.index('"$@"\nfi') < inner.index(f": >/run/burstd-boot/{vmroot.BOOTED}") < inner.index("exec python3")
    assert "os.wait()" in inner


def test_the_start_answers_with_the_boots_verdict(tmp_path):
    vm = tmp_path / "vm"
    fake_unshare = tmp_path / "bin"
    fake_unshare.mkdir()

    def start(body: str) -> int:
        (fake_unshare / "unshare").write_text(f"#!/bin/sh\n{body}\n")
        (fake_unshare / "unshare").chmod(0o755)
        env = {"PATH": f"{fake_unshare}:/usr/bin:/bin"}
        return subprocess.run(["sh", "-c", vmroot.start_script(), str(vm), "--mount"], env=env, timeout=30,
                              check=False).returncode

    # up: the VM says so and lives on (the start does not wait for it to end)
    assert start(f'touch "{vm}/boot/{vmroot.BOOTED}"; sleep 30') == 0
    # the gate refused: the boot ended with its status before the VM was up
    assert start(f"exit {vmroot.GATE_REFUSED}") == vmroot.GATE_REFUSED
    assert start("exit 1") == 1


def test_the_agent_token_arrives_with_the_boot_root_only_and_leaves_nothing_on_the_host(tmp_path):
    """The daemon's token for the lease, handed to netns.create: the provider's folder holds it until the boot
    moves it into the VM's /run/burstd-boot (<vm_dir>/boot), before the VM's first process runs."""
    vm = tmp_path / "vm"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen"
    # the fake VM reports what its /run/burstd-boot holds at its first instruction, then says it is up
    (bin_dir / "unshare").write_text(f'#!/bin/sh\nstat -c %a "{vm}/boot/{vmroot.AGENT_TOKEN}" >"{seen}"\n'
                                     f'cat "{vm}/boot/{vmroot.AGENT_TOKEN}" >>"{seen}"\n'
                                     f'touch "{vm}/boot/{vmroot.BOOTED}"\n')
    (bin_dir / "unshare").chmod(0o755)
    (vm / "boot").mkdir(parents=True)
    (vm / "boot" / vmroot.AGENT_TOKEN).write_text("a token of the VM's last life\n")  # emptied at each boot
    vmroot.hand_in_token(str(vm), "burstd-agent.v1.L1.cloud1.abc")
    assert (vm / vmroot.AGENT_TOKEN).stat().st_mode & 0o777 == 0o600
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    assert subprocess.run(["sh", "-c", vmroot.start_script(), str(vm), "--mount"], env=env, timeout=30,
                          check=False).returncode == 0
    assert seen.read_text() == "600\nburstd-agent.v1.L1.cloud1.abc\n"
    assert not (vm / vmroot.AGENT_TOKEN).exists()  # moved, not copied
    # never in a repr: a spec or a request that reaches a log line does not carry it
    spec = _spec(_root(tmp_path), agent_token="burstd-agent.v1.L1.cloud1.abc")
    assert "burstd-agent.v1" not in repr(spec)
    from burstd.providers.base import LaunchRequest

    assert "burstd-agent.v1" not in repr(LaunchRequest("L1", "cloud1", "local", agent_token="burstd-agent.v1.x"))


def test_init_pid_finds_the_process_that_is_pid_1_of_its_namespace():
    import os

    assert vmroot.init_pid([os.getpid()]) is None  # this test does not run in a PID namespace of its own
    assert vmroot.init_pid([]) is None


def test_the_head_nodes_folders_are_never_mounted_into_the_vm():
    script = vmroot._BOOT
    binds = [line for line in script.splitlines() if line.startswith("mount ")]
    sources = {line.split()[-2] for line in binds}
    # only the kernel's views, a tmpfs, and the VM's own folders: no /home, no /usr, no state dir of the head
    overlay = '"lowerdir=$img,upperdir=$vm/upper,workdir=$vm/work"'  # the image, read-only, under the VM's own
    assert sources == {'proc', '/sys', '/dev', 'tmpfs', '"$vm/boot"', '"$vm/scratch"', overlay}, sources


def test_the_key_arrives_at_boot_and_the_gate_runs_before_slurmd_and_staging_before_it_too():
    inner = vmroot.inner_script()
    gate, stage, slurmd = (inner.index("image check"), inner.index(vmroot.STAGE_IN_DIR), inner.index('  "$@"\n'))
    assert gate < stage < slurmd
    assert f"exit {vmroot.GATE_REFUSED}" in inner and vmroot.IMAGE_AGENT_CLI in inner
    assert 'install -m 0400 "$key" "$r/etc/munge/munge.key"' in vmroot._BOOT


def test_a_boot_delay_delays_slurmd_not_the_gate(tmp_path):
    argv = netns.start_argv(_spec(_root(tmp_path), boot_delay_s=2.5))
    assert argv[16:][9] == "2.500"
    assert netns.delayed_start_argv(_spec(None, boot_delay_s=2.5))[0] == "setsid"  # the shared mode as before


@pytest.mark.parametrize("field, value", [
    ("image", "relative/rootfs"), ("image", "/img,upperdir=/etc"), ("vm_dir", "/vm:/x"), ("vm_dir", "/a/../b"),
    ("munge_key", "/key with space"), ("users", ("Bad User",)), ("make_dirs", ("/ok", "/not;ok")),
])
def test_paths_that_would_change_a_mount_option_or_a_shell_word_are_refused(tmp_path, field, value):
    kw = {"image": "/img/rootfs", "vm_dir": "/var/lib/vm", field: value}
    with pytest.raises(vmroot.VmRootError, match=field.rstrip("s") if field != "users" else "user"):
        vmroot.VmRoot(**kw)


def test_the_gate_needs_both_its_reference_and_its_settings():
    with pytest.raises(vmroot.VmRootError, match="go together"):
        vmroot.VmRoot(image="/img/rootfs", vm_dir="/vm", parity_reference="/ref.json")
    with pytest.raises(vmroot.VmRootError, match="of its own"):
        vmroot.VmRoot(image="/img/rootfs", vm_dir="/")


def test_gate_refusal_reads_what_the_gate_wrote(tmp_path):
    assert vmroot.gate_refusal(tmp_path) is None
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot" / vmroot.GATE_OUT).write_text("")
    assert vmroot.gate_refusal(tmp_path) is None  # it ran and passed
    (tmp_path / "boot" / vmroot.GATE_OUT).write_text("slurmd 24.11.5 on the node, 22.05.8 on-prem\n")
    assert vmroot.gate_refusal(tmp_path) == "slurmd 24.11.5 on the node, 22.05.8 on-prem"


def test_shell_destroy_removes_an_image_vms_disk(tmp_path):
    root = _root(tmp_path)
    assert f"rm -rf {root.vm_dir}" in netns.shell_destroy(_spec(root))
    assert "rm -rf" not in netns.shell_destroy(_spec(None))


def _pool(tmp_path, **local):
    return parse_config({
        "cluster": {"id": "c1"}, "daemon": {"state_dir": str(tmp_path)},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 2, "price_per_hour": 0.1,
                   "instance_types": [{"name": "ns.small", "cpus": 2, "memory_mb": 1000}], "local": local}],
    })


def test_the_local_provider_boots_from_the_pools_image_in_a_folder_beside_its_records(tmp_path):
    provider = LocalProvider.from_config(_pool(tmp_path, image_rootfs="/images/x/rootfs", vm_users=["burstuser"],
                                               parity_reference_file="/r.json", parity_spec_file="/p.toml"),
                                         "local")
    root = provider.root_of("sl-cloud1")
    assert root is not None and root.image == "/images/x/rootfs" and root.users == ("burstuser",)
    assert root.vm_dir == str(tmp_path / "local" / "local" / "sl-cloud1.vm")
    assert (root.parity_reference, root.parity_spec) == ("/r.json", "/p.toml")
    assert LocalProvider.from_config(_pool(tmp_path), "local").root_of("sl-cloud1") is None


def test_a_bad_image_setting_fails_when_the_provider_is_made_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"pools.local.local: invalid image 'images/x'"):
        LocalProvider.from_config(_pool(tmp_path, image_rootfs="images/x"), "local")


def test_the_vms_init_parses_even_when_a_hook_script_indents_the_boot():
    import shlex
    import sys
    import textwrap

    indented = textwrap.indent(vmroot.inner_script(), "    ")  # as burstd.testbed.render embeds it
    line = next(x for x in indented.splitlines() if "exec python3 -c" in x)
    code = shlex.split(line)[-1]
    compile(code, "<init>", "exec")
    # it runs (and keeps running: an init never returns); a syntax error would end it at once
    proc = subprocess.run(["timeout", "1", sys.executable, "-c", code], check=False)
    assert proc.returncode == 124
