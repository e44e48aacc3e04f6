"""What ``burstctl testbed status`` reports of a bed: its Slurm daemons, network, nodes as Slurm sees them, VMs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from burstd.providers.local import netns
from burstd.testbed import release
from burstd.testbed.host import _sh

if TYPE_CHECKING:
    from burstd.testbed.bed import Bed


def report(bed: Bed) -> dict[str, Any]:
    ctld = bed.ctld_pid()
    up = ctld is not None and bed.ping()
    nodes: dict[str, dict[str, Any]] = {}
    if up:
        proc = _sh(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%o|%E"], "sinfo", env=bed.env, check=False)
        for line in proc.stdout.splitlines():
            name, part, state, addr, reason = (line.split("|") + [""] * 5)[:5]
            entry = nodes.setdefault(name, {"partitions": [], "state": state, "address": addr,
                                            "reason": reason})
            entry["partitions"].append(part.rstrip("*"))
    vms = [{"netns": r.netns, "node": r.node_name, "address": r.address, "state": r.state,
            "alive": r.alive, "tags": r.tags} for r in netns.list_vms(bed.vms_dir)]
    return {
        "name": bed.name,
        "up": up,
        "state_dir": str(bed.state_dir),
        "conf": str(bed.conf_path),
        "hooks": bed.hook_mode,
        "slurm_version": bed._saved("slurm_version"),
        "chroot": str(release.chroot_path(bed.config.slurm_release))
        if bed.chroot and bed.config.slurm_release else None,
        "accounting": {"slurmdbd": bed.accounting.dbd_pid(), "mariadbd": bed.accounting.db_pid(),
                       "dbd_port": bed.config.dbd_port_, "db_port": bed.config.db_port_}
        if bed.config.accounting else None,
        "slurmctld": {"pid": ctld, "addr": bed.ctld_addr, "port": bed.ctld_port},
        "slurmrestd": {"pid": bed.rest_pid(), "url": bed.rest_url},
        "subnet": bed.subnet,
        "bridge": bed.bridge,
        "bridge_exists": netns.link_exists(bed.bridge),
        "netns_prefix": bed.netns_prefix,
        "partitions": {"onprem": bed.onprem_partition, "cloud": bed.cloud_partition},
        "nodes": nodes,
        "vms": vms,
        "namespaces": sorted(bed.vm_namespaces()),
        "burstd_config": str(bed.burstd_config),
    }
