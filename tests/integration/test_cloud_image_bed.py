"""``burstctl testbed up --cloud-image DIR`` (issue 23 item 4): Slurm's own resume hook boots the cloud VMs from the
image; one built for another Slurm release than the on-prem side is refused by the gate with the mismatch named,
and the matching one runs the job.

A bed of its own (the session bed's slot + 71), brought up and down through the CLI as an admin would, with the
bare hooks (Slurm's ResumeProgram makes the VM, no daemon). The images come from the cache (built once per
machine: scripts/install-deps.sh).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from burstd.image import cache
from burstd.providers.local import vmroot
from burstd.testbed import Bed, BedConfig, cloud_image

pytestmark = pytest.mark.bed


def _burstctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burstd.cli.app", *args], capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture
def image_bed(slurm_bed):
    if slurm_bed.config.slurm_release is not None:
        pytest.skip("the gate's on-prem reference is measured on the head: a bed of the host's Slurm (22.05)")
    name = f"{slurm_bed.name[:7]}-img"
    slot = slurm_bed.config.slot + 71
    beds: list[Bed] = []

    def up(release: str) -> Bed:
        folder = cache.ensure(cloud_image.default_spec(release), release)
        proc = _burstctl("testbed", "up", "--name", name, "--slot", str(slot), "--hooks", "bare",
                         "--cloud-nodes", "1", "--onprem-nodes", "1", "--suspend-time", "10",
                         "--cloud-image", str(folder))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        bed = Bed(BedConfig.from_env({}, name=name, slot=slot, cloud_count=1, onprem_count=1, hooks="bare",
                                     suspend_time=10, cloud_image=str(folder)))
        beds.append(bed)
        return bed

    def down() -> None:
        proc = _burstctl("testbed", "down", "--name", name, "--slot", str(slot))
        assert proc.returncode == 0, proc.stdout + proc.stderr

    try:
        yield up, down
    finally:
        if beds:
            down()


def _boot_dir(bed: Bed) -> str:
    return str(bed.state_dir / "vms" / f"{bed.config.netns_of(bed.cloud_nodes[0])}.vm")


def test_the_bed_boots_its_cloud_vms_from_the_image_the_gate_refusing_another_release(image_bed):
    up, down = image_bed
    bed = up("24.11")
    job = bed.sbatch(["-p", bed.cloud_partition, "--chdir=/tmp", "-o", "/tmp/o-%j"], "#!/bin/sh\nhostname\n",
                     user="burstuser")
    refusal = bed.wait_for(lambda: vmroot.gate_refusal(_boot_dir(bed)), 60, "the gate's answer")
    assert "slurmd 24.11." in refusal and "on the node, 22.05.8 on-prem" in refusal
    console = bed.state_dir / "vms" / f"{bed.config.netns_of(bed.cloud_nodes[0])}.console.log"
    bed.wait_for(lambda: "parity gate: the image differs from on-prem, slurmd not started" in console.read_text(),
                 10, "the VM's console to say why slurmd did not start")
    time.sleep(5)
    assert bed.job(job).get("JobState") != "RUNNING" and "RUNNING" not in bed.node(bed.cloud_nodes[0])["State"]
    bed.run(["scancel", str(job)])
    down()

    bed = up("22.05")
    head_only = bed.workdir("burstuser") / "head-only.txt"
    head_only.write_text("head\n")
    job = bed.sbatch(["-p", bed.cloud_partition, "--chdir=/scratch", "-o", "/scratch/o-%j"],
                     f"#!/bin/sh\nhostname\ncat /etc/burstd-image\nif test -e {head_only}; then echo SEES-HEAD-FILE; fi\n",
                     user="burstuser")
    bed.wait_for(lambda: bed.job(job).get("JobState") in ("COMPLETED", "FAILED"), 120, f"job {job} to end")
    assert bed.job(job)["JobState"] == "COMPLETED"
    assert vmroot.gate_refusal(_boot_dir(bed)) is None
    out = (bed.state_dir / "vms" / f"{bed.config.netns_of(bed.cloud_nodes[0])}.vm" / "scratch" / f"o-{job}")
    text = out.read_text()
    assert text.startswith(bed.cloud_nodes[0] + "\n") and '"slurm_release": "22.05"' in text
    assert "SEES-HEAD-FILE" not in text
    assert os.path.exists(head_only)  # the file is there on the head: the VM does not see it
