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


def test_a_bed_takes_down_its_own_namespaces_never_those_of_a_bed_whose_name_starts_like_its(tmp_path, monkeypatch):
    """Worker 0's bed ``x`` (slot > 0: prefix ``x-``) beside ``x-w1`` and the data bed ``x-dat``: bringing ``x`` down
    once killed the other beds' VMs mid-test (every namespace starting with ``x-``)."""
    from burstd.providers.local import netns

    live = {"x-cloud1", "x-onprem2", "x-w1-cloud1", "x-dat-cloud1", "x-cloudy", "sl-cloud1"}
    monkeypatch.setattr(netns, "list_netns", lambda: set(live))
    monkeypatch.setattr(netns, "link_exists", lambda name: False)
    monkeypatch.setattr(netns, "list_vms", lambda folder: [])
    bed = Bed(BedConfig(state_dir=str(tmp_path), name="x", slot=7))
    assert bed.netns_prefix == "x-"
    assert bed.vm_namespaces() == {"x-cloud1", "x-onprem2"}
