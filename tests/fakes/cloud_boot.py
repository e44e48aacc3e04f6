"""Stand-in for a cloud VM's boot: a namespace slurmd for every instance a fake cloud says is running.

moto and the fake Compute Engine create instances that never boot. ``CloudBootStandIn`` watches the providers'
``list_instances()`` and, for each live instance of a bed cloud node, starts a namespace "VM" on the bed (the
bed's own netns primitive, a real configless slurmd under the node's name), as the node bootstrap would on a real
VM; when the instance is gone (terminated, preempted) it tears that VM down, as the cloud would.

    with CloudBootStandIn(bed, [aws_provider, gcp_provider], tmp_path) as boot:
        ...                       # a background thread syncs every second; boot.sync() forces one pass
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from burstd.providers.base import Provider
from burstd.providers.local import netns
from burstd.testbed import render

log = logging.getLogger("tests.cloud_boot")


class CloudBootStandIn:
    # A pass lists every provider's instances (a describe call through boto3 or the GCE client, answered by moto or
    # the fake in this same worker): about 25 ms of CPU for four instances, so 8% of a core at three passes a
    # second. Once a second: a real VM's boot takes far longer than that delay (docs/testbed.md, round twelve).
    def __init__(self, bed, providers: list[Provider], records_dir: Path, interval_s: float = 1.0):
        self.bed = bed
        self.providers = providers
        self.records_dir = Path(records_dir)
        self.records_dir.mkdir(parents=True, exist_ok=True)
        self.interval_s = interval_s
        self.booted: dict[str, str] = {}  # node -> instance id
        self.history: list[tuple[str, str, str]] = []  # (event, node, instance id)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _spec(self, node: str, instance_id: str) -> netns.VmSpec:
        cfg = self.bed.config
        return netns.VmSpec(netns=cfg.netns_of(node), node_name=node, address=cfg.node_address(node),
                            bridge=self.bed.bridge, conf_server=cfg.conf_server, slurmd_args=("-b",),
                            slurmd=render.vm_spec(cfg, node, boot_flag=True).slurmd,  # the bed release's slurmd
                            instance_id=instance_id.replace("/", "_"), tags={"cloud-instance": instance_id},
                            boot_delay_s=cfg.vm_boot_delay_s)  # see BedConfig.vm_boot_delay_s

    def sync(self) -> None:
        with self._lock:
            wanted: dict[str, str] = {}
            for provider in self.providers:
                for inst in provider.list_instances():
                    if inst.node_name in self.bed.cloud_nodes and inst.state in ("pending", "running"):
                        wanted[inst.node_name] = inst.instance_id
            for node, iid in list(self.booted.items()):
                if wanted.get(node) != iid:
                    netns.destroy(self.bed.config.netns_of(node), self.records_dir)
                    del self.booted[node]
                    self.history.append(("down", node, iid))
            for node, iid in wanted.items():
                if node not in self.booted:
                    netns.create(self._spec(node, iid), self.records_dir)
                    self.booted[node] = iid
                    self.history.append(("up", node, iid))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - kept for the test to assert on
                self.errors.append(repr(exc))
                log.exception("cloud boot stand-in")

    def start(self) -> CloudBootStandIn:
        self._thread = threading.Thread(target=self._run, name="cloud-boot", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        with self._lock:
            for node in list(self.booted):
                netns.destroy(self.bed.config.netns_of(node), self.records_dir)
                self.history.append(("down", node, self.booted.pop(node)))

    def __enter__(self) -> CloudBootStandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
