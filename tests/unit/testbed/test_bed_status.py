"""``burstctl testbed status`` of a bed that is not up: what it reports without any daemon to ask."""

from burstd.testbed import release
from burstd.testbed.bed import Bed
from burstd.testbed.config import BedConfig


def test_a_bed_that_is_down_reports_its_layout_and_no_nodes(tmp_path):
    report = Bed(BedConfig(state_dir=str(tmp_path), name="seamsx")).status()
    assert (report["name"], report["up"], report["nodes"], report["vms"]) == ("seamsx", False, {}, [])
    assert report["state_dir"] == str(tmp_path) and report["chroot"] is None
    assert report["slurmctld"]["pid"] is None and report["burstd_config"].startswith(str(tmp_path))


def test_a_release_bed_names_its_chroot(tmp_path):
    report = Bed(BedConfig(state_dir=str(tmp_path), name="seamsy", slurm_release="26.05")).status()
    assert report["chroot"] == str(release.chroot_path("26.05"))
