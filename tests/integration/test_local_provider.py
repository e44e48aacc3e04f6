"""The local provider on the live bed: namespace VMs running a real slurmd (burstd/providers/local)."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from burstd.config import parse_config
from burstd.providers.base import ErrorKind, LaunchRequest, ProviderError
from burstd.providers.local import netns
from burstd.providers.local.provider import TAG_CLUSTER, TAG_LEASE, TAG_NODE, LocalProvider, instance_id_for
from burstd.testbed import Bed, BedConfig

pytestmark = pytest.mark.bed


def _config(bed: Bed, state_dir, **local):
    return parse_config({
        "cluster": {"id": f"t{uuid.uuid4().hex[:8]}"},
        "daemon": {"state_dir": str(state_dir)},
        "pools": [{
            "name": "local", "provider": "local", "partition": bed.cloud_partition,
            "node_prefix": bed.config.cloud_prefix, "node_count": bed.config.cloud_count,
            "price_per_hour": 0.25,
            "instance_types": [{"name": "ns.small", "cpus": 2, "memory_mb": 1000}],
            "local": {"subnet": bed.subnet, "bridge": bed.bridge, "first_host": bed.config.cloud_first_host,
                      "netns_prefix": bed.netns_prefix, "conf_server": bed.config.conf_server, **local},
        }],
    })


def _req(node: str, lease: str | None = None) -> LaunchRequest:
    return LaunchRequest(lease_id=lease or f"lease-{uuid.uuid4().hex[:8]}", node_name=node, pool="local")


def _power_down(bed: Bed, node: str) -> None:
    assert node in bed.reset_cloud_nodes()  # the unexpected registration had powered it up


def test_launch_boots_a_vm_that_joins_slurm_and_survives_a_provider_restart(slurm_bed, tmp_path):
    cfg = _config(slurm_bed, tmp_path)
    provider = LocalProvider.from_config(cfg, "local")
    node = slurm_bed.cloud_nodes[1]
    req = _req(node)
    try:
        inst = provider.launch(req)
        assert inst.instance_id == instance_id_for(req.lease_id) and inst.lease_id == req.lease_id
        assert inst.address == slurm_bed.config.node_address(node).split("/")[0]
        assert inst.state == "running" and inst.price_per_hour_micros == 250_000
        ns = provider.netns_of(node)
        assert netns.netns_exists(ns)
        # a real slurmd registers with slurmctld from the VM's own address
        slurm_bed.wait_for(lambda: slurm_bed.node(node).get("NodeAddr") == inst.address
                           and "IDLE" in slurm_bed.node(node).get("State", ""), 30, f"{node} to register")
        slurmd = next(p for p in netns.netns_pids(ns)
                      if open(f"/proc/{p}/comm").read().strip() == "slurmd")
        host = subprocess.run(["nsenter", "-t", str(slurmd), "--uts", "hostname"], capture_output=True,
                              text=True)
        assert host.stdout.strip() == node

        again = provider.launch(req)  # idempotent on the lease id: same VM, no second one
        assert again.instance_id == inst.instance_id and again.launched_at == inst.launched_at
        assert len([n for n in netns.list_netns() if n == ns]) == 1

        restarted = LocalProvider.from_config(cfg, "local")  # a daemon restart finds it from disk + system
        [found] = restarted.list_instances()
        assert (found.instance_id, found.lease_id, found.node_name, found.state) == (
            inst.instance_id, req.lease_id, node, "running")
        rec = netns.read_record(restarted.records_dir, ns)
        assert rec.tags[TAG_CLUSTER] == cfg.cluster.id and rec.tags[TAG_LEASE] == req.lease_id
        assert rec.tags[TAG_NODE] == node

        restarted.terminate([inst.instance_id])
        assert not netns.netns_exists(ns) and not netns.netns_pids(ns)
        assert provider.list_instances() == []
        restarted.terminate([inst.instance_id])  # idempotent
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
        _power_down(slurm_bed, node)


def test_capacity_node_conflicts_and_boot_delay(slurm_bed, tmp_path):
    # a long boot delay: slurmd never starts during this test, so Slurm is not involved
    provider = LocalProvider.from_config(_config(slurm_bed, tmp_path, capacity=1, boot_delay_s=600), "local")
    a, b = slurm_bed.cloud_nodes[2], slurm_bed.cloud_nodes[3]
    try:
        first = provider.launch(_req(a, "lease-a"))
        assert first.state == "pending"  # booting
        sleeper = netns.netns_pids(provider.netns_of(a))
        assert sleeper, "the delayed boot waits inside the namespace"
        with pytest.raises(ProviderError) as full:
            provider.launch(_req(b, "lease-b"))
        assert full.value.kind is ErrorKind.CAPACITY and full.value.offering == provider.offering
        with pytest.raises(ProviderError) as busy:
            provider.launch(_req(a, "lease-other"))
        assert busy.value.kind is ErrorKind.TRANSIENT and busy.value.code == "NodeBusy"
        assert provider.launch(_req(a, "lease-a")).instance_id == first.instance_id  # retry is fine when full
        with pytest.raises(ProviderError) as unknown:
            provider.launch(_req("nosuchnode1"))
        assert unknown.value.kind is ErrorKind.CONFIG

        provider.terminate([first.instance_id])
        assert not netns.netns_exists(provider.netns_of(a))
        assert all(not _alive(p) for p in sleeper)  # nothing in the VM outlives it
        second = provider.launch(_req(b, "lease-b"))
        assert [i.instance_id for i in provider.list_instances()] == [second.instance_id]
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
    assert provider.list_instances() == []


def test_preempted_vm_is_listed_as_preempted_until_terminated(slurm_bed, tmp_path):
    provider = LocalProvider.from_config(_config(slurm_bed, tmp_path, boot_delay_s=600), "local")
    node = slurm_bed.cloud_nodes[0]
    inst = provider.launch(_req(node))
    try:
        assert provider.preempt(inst.instance_id)
        [gone] = provider.list_instances()
        assert gone.preempted and gone.is_gone and gone.instance_id == inst.instance_id
        assert not netns.netns_exists(provider.netns_of(node))
    finally:
        provider.terminate([inst.instance_id])
    assert provider.list_instances() == []


def test_a_launch_interrupted_after_its_record_is_completed_by_the_retry(slurm_bed, tmp_path):
    provider = LocalProvider.from_config(_config(slurm_bed, tmp_path, boot_delay_s=600), "local")
    node = slurm_bed.cloud_nodes[0]
    req = _req(node)
    # the state a crash right after the durable record (and before any namespace) leaves behind
    spec = netns.VmSpec(netns=provider.netns_of(node), node_name=node, address=provider.address_of(node),
                        bridge=provider.local.bridge, instance_id=instance_id_for(req.lease_id),
                        tags={TAG_CLUSTER: provider.cluster_id, TAG_LEASE: req.lease_id, TAG_NODE: node,
                              "burstd:pool": "local"})
    netns.write_record(provider.records_dir, netns.VmRecord(
        netns=spec.netns, node_name=node, hostname=node, address=spec.address, bridge=spec.bridge,
        veth=spec.veth, instance_id=spec.instance_id, created_at=1.0, tags=spec.tags))
    try:
        [pending] = provider.list_instances()
        assert pending.state == "pending" and pending.lease_id == req.lease_id
        done = provider.launch(req)
        assert done.instance_id == pending.instance_id and netns.netns_exists(spec.netns)
        assert len(provider.list_instances()) == 1
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])


class _ServiceHook:
    """A per-VM service like the metadata endpoint: a process started inside the VM's namespace."""

    def __init__(self, fail: bool = False):
        self.fail, self.started, self.stopped = fail, [], []

    def vm_started(self, vm):
        subprocess.run(["setsid", "-f", *netns.enter_argv(vm.netns), "sleep", "600"], check=True)
        self.started.append(vm.netns)
        if self.fail:
            raise RuntimeError("service did not come up")
        return {"service_url": f"http://{vm.ip}:1338"}

    def vm_stopping(self, vm):
        self.stopped.append(vm.netns)


def test_vm_hooks_start_services_inside_the_vm_and_a_failed_one_takes_the_vm_back(slurm_bed, tmp_path):
    cfg = _config(slurm_bed, tmp_path, boot_delay_s=600)
    node = slurm_bed.cloud_nodes[0]
    hook = _ServiceHook()
    provider = LocalProvider.from_config(cfg, "local", hooks=[hook])
    inst = provider.launch(_req(node))
    ns = provider.netns_of(node)
    try:
        assert hook.started == [ns] and inst.extra["service_url"] == f"http://{inst.address}:1338"
        assert LocalProvider.from_config(cfg, "local").list_instances()[0].extra["service_url"]  # on disk
        service = netns.netns_pids(ns)
        assert service
    finally:
        provider.terminate([inst.instance_id])
    assert hook.stopped == [ns] and all(not _alive(p) for p in service)

    failing = LocalProvider.from_config(cfg, "local", hooks=[_ServiceHook(fail=True)])
    with pytest.raises(ProviderError) as err:
        failing.launch(_req(node))
    assert err.value.kind is ErrorKind.TRANSIENT and err.value.code == "VmHookFailed"
    assert not netns.netns_exists(ns) and failing.list_instances() == []


def test_a_launch_interrupted_after_slurmd_started_keeps_the_vm_and_starts_its_services(slurm_bed, tmp_path):
    """A leader killed between slurmd's start and the end of its launch (seen in CI: Slurm had already started
    a job on the VM): the new leader's launch of the same lease adopts the VM instead of remaking it, which
    would kill the job, and starts the per-VM services the crash left unstarted; once, not at every call."""
    hook = _ServiceHook()
    provider = LocalProvider.from_config(_config(slurm_bed, tmp_path, boot_delay_s=600), "local", hooks=[hook])
    node = slurm_bed.cloud_nodes[0]
    req = _req(node)
    first = provider.launch(req)
    ns = provider.netns_of(node)
    try:
        booted = netns.netns_pids(ns)
        assert booted and hook.started == [ns]
        # the record as the crash leaves it: written "launching" before the namespace, slurmd started since
        rec = netns.read_record(provider.records_dir, ns)
        rec.state, rec.services_up, rec.extra = "launching", False, {}
        netns.write_record(provider.records_dir, rec)
        assert provider.list_instances()[0].state == "pending"

        again = provider.launch(req)
        assert again.instance_id == first.instance_id and again.state == "pending"  # booting: slurmd delayed
        assert all(_alive(p) for p in booted), "the relaunch killed what ran in the VM"
        assert hook.started == [ns, ns] and again.extra["service_url"] == first.extra["service_url"]
        assert netns.read_record(provider.records_dir, ns).services_up
        provider.launch(req)
        assert hook.started == [ns, ns] and len(provider.list_instances()) == 1
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
    assert not netns.netns_exists(ns)


@pytest.mark.slow
def test_testbed_down_removes_the_providers_vms(slurm_bed, tmp_path):
    other = Bed(BedConfig(name="bedprov", slot=slurm_bed.config.slot + 71, onprem_count=1, cloud_count=2))
    try:
        other.up(install=False)
        provider = LocalProvider.from_config(_config(other, tmp_path, boot_delay_s=600), "local")
        inst = provider.launch(_req(other.cloud_nodes[0]))
        pids = netns.netns_pids(provider.netns_of(other.cloud_nodes[0]))
        assert pids and inst.state == "pending"
    finally:
        other.down()
    assert not netns.netns_exists(provider.netns_of(other.cloud_nodes[0]))
    assert all(not _alive(p) for p in pids)
    assert [i.state for i in provider.list_instances()] == ["preempted"]  # the record says it vanished


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
