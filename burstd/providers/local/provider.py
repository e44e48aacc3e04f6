"""The local provider: burstd's embedded default "cloud", whose VMs are network namespaces on this host.

    provider = LocalProvider.from_config(cfg, "local")
    inst = provider.launch(LaunchRequest(lease_id="L-1", node_name="cloud1", pool="local"))
    provider.list_instances()          # survives a daemon restart: records on disk + live namespaces
    provider.terminate([inst.instance_id])

A VM gets the address ``subnet[first_host + index - 1]`` for node ``<node_prefix><index>``, its own hostname
(the node name) and a real ``slurmd -b -N <node> --conf-server <ctld>``; it joins the pool's bridge (the test
bed's). Launch is idempotent on the lease id (the instance id is derived from it and the record is written
before anything is created); ``boot_delay_s`` delays slurmd like a slow cloud boot; beyond ``capacity`` live
VMs a launch fails with ``ErrorKind.CAPACITY``. Every VM record carries the tags ``burstd:cluster``,
``burstd:lease``, ``burstd:node`` and ``burstd:pool``.

Per-VM extras (the metadata endpoint the agent polls, an agent process) plug in through :class:`VmHook`: the
provider calls ``vm_started`` after a VM is up (what it returns is stored in the record's ``extra``) and
``vm_stopping`` before the VM is torn down. Anything a hook starts *inside* the namespace
(``netns.enter_argv``) dies with the VM; anything it starts outside must be stopped in ``vm_stopping``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from burstd.config import Config, LocalPoolConfig, PoolConfig
from burstd.domain.money import usd_to_micros
from burstd.providers.base import (
    ErrorKind,
    Instance,
    LaunchRequest,
    Offering,
    ParityRefusedError,
    ProviderError,
)
from burstd.providers.local import netns, vmroot
from burstd.secure_files import LockTimeout

log = logging.getLogger(__name__)

ZONE = "local"
TAG_CLUSTER, TAG_LEASE, TAG_NODE, TAG_POOL = "burstd:cluster", "burstd:lease", "burstd:node", "burstd:pool"


class VmHook(Protocol):
    """Extra per-VM services (e.g. ``burstd.providers.local.metadata``): started after, stopped before."""

    def vm_started(self, vm: netns.VmRecord) -> dict[str, str]: ...

    def vm_stopping(self, vm: netns.VmRecord) -> None: ...


def instance_id_for(lease_id: str) -> str:
    return "lv-" + hashlib.sha1(lease_id.encode()).hexdigest()[:16]


class LocalProvider:
    def __init__(self, pool: PoolConfig, config: Config | None = None, *, cluster_id: str | None = None,
                 state_dir: str | Path | None = None, hooks: Sequence[VmHook] = ()):
        """``LocalProvider(pool, config)`` like the other providers, or with ``cluster_id``/``state_dir``."""
        cluster_id = cluster_id or (config.cluster.id if config else None)
        state_dir = state_dir or (config.daemon.state_dir if config else None)
        if cluster_id is None or state_dir is None:
            raise ValueError("LocalProvider needs a config, or cluster_id and state_dir")
        if pool.provider != "local":
            raise ValueError(f"pool {pool.name!r} has provider {pool.provider!r}, not 'local'")
        self.pool = pool
        self.local: LocalPoolConfig = pool.local or LocalPoolConfig()
        self.name = pool.name
        self.cluster_id = cluster_id
        self.records_dir = Path(self.local.records_dir or Path(state_dir) / "local" / pool.name)
        self.hooks = list(hooks)
        self.network = ipaddress.IPv4Network(self.local.subnet, strict=False)
        self.conf_server = self.local.conf_server or f"{self.network.network_address + 1}:6817"
        limits = (self.local.capacity, pool.max_nodes, pool.node_count)
        self.capacity = next(c for c in limits if c is not None)
        self.offering = Offering(instance_type=pool.instance_types[0].name, zone=ZONE, market=pool.market)
        self.lock_timeout_s = netns.RECORDS_LOCK_TIMEOUT_S
        if self.local.image_rootfs is not None:
            self.root_of("check")  # a bad path fails here, naming the setting, not at the first launch

    @classmethod
    def from_config(cls, config: Config, pool_name: str, hooks: Sequence[VmHook] = ()) -> LocalProvider:
        return cls(config.pool(pool_name), config, hooks=hooks)

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One launch/terminate at a time across processes (hooks, daemon, burstctl); a lock held past its bound
        is a transient error of this call, never a reconcile loop frozen behind it."""
        try:
            with netns.records_lock(self.records_dir, self.lock_timeout_s):
                yield
        except LockTimeout as exc:
            raise ProviderError(ErrorKind.TRANSIENT, str(exc), code="LockTimeout") from None

    def root_of(self, ns: str) -> vmroot.VmRoot | None:
        """What a VM boots from: the pool's image, in a folder of its own beside the records (None: no image)."""
        local = self.local
        if local.image_rootfs is None:
            return None
        try:
            return vmroot.VmRoot(
                image=local.image_rootfs, vm_dir=str(self.records_dir / f"{ns}.vm"),
                munge_key=local.munge_key_file, users=tuple(local.vm_users), make_dirs=tuple(local.vm_dirs),
                parity_reference=local.parity_reference_file, parity_spec=local.parity_spec_file)
        except vmroot.VmRootError as exc:
            raise ValueError(f"pools.{self.name}.local: {exc}") from None

    @property
    def wants_agent_token(self) -> bool:
        """An image VM gets its node's agent token at boot (the daemon mints it into ``LaunchRequest``): its agent
        reaches the daemon through the nodes' socket, where that token is the only credential."""
        return self.local.image_rootfs is not None and self.local.vm_agent

    def netns_of(self, node_name: str) -> str:
        return f"{self.local.netns_prefix}{node_name}"

    def address_of(self, node_name: str) -> str:
        rest = node_name[len(self.pool.node_prefix):]
        if not (node_name.startswith(self.pool.node_prefix) and rest.isdigit()
                and 1 <= int(rest) <= self.pool.node_count):
            raise ProviderError(ErrorKind.CONFIG, f"node {node_name!r} is not in pool {self.name!r} "
                                f"({self.pool.node_prefix}1..{self.pool.node_prefix}{self.pool.node_count})",
                                code="UnknownNode")
        host = self.network.network_address + self.local.first_host + int(rest) - 1
        if host not in self.network or host == self.network.broadcast_address:
            raise ProviderError(ErrorKind.CONFIG, f"node {node_name!r}: address {host} is outside subnet "
                                f"{self.network} (first_host {self.local.first_host})", code="NoAddress")
        return f"{host}/{self.network.prefixlen}"

    def _price_micros(self) -> int:
        t = self.pool.instance_types[0]
        if t.price_per_hour is not None:
            return usd_to_micros(t.price_per_hour)
        if self.pool.market == "on-demand" and self.pool.ondemand_price_per_hour is not None:
            return usd_to_micros(self.pool.ondemand_price_per_hour)
        return usd_to_micros(self.pool.price_per_hour)

    def _mine(self, rec: netns.VmRecord) -> bool:
        return rec.tags.get(TAG_CLUSTER) == self.cluster_id and rec.tags.get(TAG_POOL) == self.name

    def _instance(self, rec: netns.VmRecord, pids: dict[str, list[int]]) -> Instance:
        if rec.state == "preempted":
            state = "preempted"
        elif not rec.alive:
            # a launch interrupted before the namespace existed is still pending (launching again completes
            # it); a booted VM whose namespace vanished was reclaimed behind our back
            state = "pending" if rec.state == "launching" else "preempted"
        elif rec.state == "launching" or time.time() < rec.boot_at or not pids.get(rec.netns):
            state = "pending"
        else:
            state = "running"
        return Instance(
            instance_id=rec.instance_id, lease_id=rec.tags.get(TAG_LEASE, ""), node_name=rec.node_name,
            pool=self.name, state=state, launched_at=rec.created_at, offering=self.offering,
            address=rec.ip,
            price_per_hour_micros=int(rec.tags.get("burstd:price_micros", self._price_micros())),
            preempted=state == "preempted", extra={"netns": rec.netns, **rec.extra},
        )

    def _records(self) -> list[netns.VmRecord]:
        return [r for r in netns.list_vms(self.records_dir) if self._mine(r)]

    # ------------------------------------------------------------------ Provider protocol

    def launch(self, request: LaunchRequest) -> Instance:
        if request.pool != self.name:
            raise ProviderError(ErrorKind.CONFIG,
                                f"launch for pool {request.pool!r} sent to pool {self.name!r}")
        if self.offering in request.exclude:
            raise ProviderError(ErrorKind.CAPACITY, f"the only offering of pool {self.name!r} is cooled down",
                                code="OfferingExcluded", offering=self.offering)
        address = self.address_of(request.node_name)
        if not netns.link_exists(self.local.bridge):
            raise ProviderError(ErrorKind.CONFIG,
                                f"bridge {self.local.bridge!r} does not exist: bring the test "
                                "bed up (`burstctl testbed up`) or fix pools.local.bridge", code="NoBridge")
        ns = self.netns_of(request.node_name)
        with self._locked():
            records = self._records()
            for rec in records:
                if rec.tags.get(TAG_LEASE) == request.lease_id:
                    if rec.alive and rec.state in ("booting", "running"):
                        if self.hooks and not rec.services_up:
                            self._start_hooks(rec)  # a crash came between slurmd's start and the VM's services
                        return self._instance(rec, netns.pids_by_netns())  # idempotent: the same VM
                    if rec.state == "preempted":
                        return self._instance(rec, {})
            holder = next((r for r in records if r.netns == ns and r.tags.get(TAG_LEASE) != request.lease_id),
                          None)
            if holder is not None:
                if holder.alive:
                    raise ProviderError(ErrorKind.TRANSIENT, f"node {request.node_name} still runs the VM of "
                                        f"lease {holder.tags.get(TAG_LEASE)!r}; terminate it first",
                                        code="NodeBusy")
                netns.remove_record(self.records_dir, ns)  # a gone VM of an older lease
                records.remove(holder)
            live = [r for r in records if r.alive and r.state != "preempted"
                    and r.tags.get(TAG_LEASE) != request.lease_id]
            if len(live) >= self.capacity:
                raise ProviderError(ErrorKind.CAPACITY, f"pool {self.name!r} is full ({len(live)} of "
                                    f"{self.capacity} VMs)", code="InsufficientInstanceCapacity",
                                    offering=self.offering)
            spec = netns.VmSpec(
                netns=ns, node_name=request.node_name, address=address, bridge=self.local.bridge,
                conf_server=self.conf_server, slurmd=self.local.slurmd_path, slurmd_args=("-b",),
                root=self.root_of(ns), agent_token=request.agent_token,
                boot_delay_s=self.local.boot_delay_s, instance_id=instance_id_for(request.lease_id),
                tags={TAG_CLUSTER: self.cluster_id, TAG_LEASE: request.lease_id, TAG_NODE: request.node_name,
                      TAG_POOL: self.name, "burstd:market": request.market,
                      "burstd:price_micros": str(self._price_micros())},
            )
            try:
                rec = netns.create(spec, self.records_dir)
            except netns.ParityRefused as exc:  # the same image would be refused again: never retried
                netns.remove_record(self.records_dir, ns)
                raise ParityRefusedError(str(exc), exc.differences) from exc
            except (netns.NetnsError, ValueError) as exc:
                raise ProviderError(ErrorKind.TRANSIENT, str(exc), code="LaunchFailed") from exc
            if self.hooks and not rec.services_up:
                self._start_hooks(rec)
            return self._instance(rec, netns.pids_by_netns())

    def _start_hooks(self, rec: netns.VmRecord) -> None:
        """Start the VM's services and mark them up in its record (a relaunch after a crash between slurmd's
        start and this mark starts them again: the hooks tolerate that)."""
        try:
            for hook in self.hooks:
                rec.extra.update(hook.vm_started(rec) or {})
        except Exception as exc:  # a VM without its services is no VM: take it back, let the daemon retry
            self._stop_hooks(rec)
            netns.destroy(rec.netns, self.records_dir)
            raise ProviderError(ErrorKind.TRANSIENT,
                                f"VM {rec.netns}: per-VM service failed to start: {exc}",
                                code="VmHookFailed") from exc
        rec.services_up = True
        netns.write_record(self.records_dir, rec)

    def _stop_hooks(self, rec: netns.VmRecord) -> None:
        """Tell every hook the VM is going; one failing hook never keeps a VM alive."""
        for hook in self.hooks:
            try:
                hook.vm_stopping(rec)
            except Exception:  # noqa: BLE001 - the VM is torn down regardless
                log.warning("VM %s: %s.vm_stopping failed", rec.netns, type(hook).__name__, exc_info=True)

    def terminate(self, instance_ids: list[str]) -> None:
        wanted = set(instance_ids)
        with self._locked():
            for rec in self._records():
                if rec.instance_id in wanted:
                    self._stop_hooks(rec)
                    netns.destroy(rec.netns, self.records_dir)

    def preempt(self, instance_id: str) -> bool:
        """Reclaim a VM the way a spot market does: everything in it dies; it stays listed as preempted."""
        with self._locked():
            for rec in self._records():
                if rec.instance_id == instance_id and rec.state != "preempted":
                    self._stop_hooks(rec)
                    netns.destroy(rec.netns, self.records_dir, keep_record_as="preempted", power_off=True)
                    return True
        return False

    def list_instances(self) -> list[Instance]:
        pids = netns.pids_by_netns()
        return [self._instance(r, pids) for r in self._records()]

    def prices(self) -> dict[Offering, int]:
        out = {self.offering: self._price_micros()}
        for t in self.pool.instance_types[1:]:
            price = t.price_per_hour if t.price_per_hour is not None else self.pool.price_per_hour
            out[Offering(t.name, ZONE, self.pool.market)] = usd_to_micros(price)
        return out

    def close(self) -> None:
        pass
