"""The GCP provider: one burstd pool on Compute Engine.

    provider = GcpProvider(pool_config, cluster_id="site1", cloud=config.cloud, cooldown=shared_cooldown)
    inst = provider.launch(LaunchRequest(lease_id="L1", node_name="gcp-1", pool="gcp"))

``launch`` asks ``bulkInsert`` for one SPOT VM (``instanceTerminationAction`` DELETE, or STOP) per machine
type in config order: zonal when the pool has one zone, regional with a location policy (cooled-down zones
DENY) when it has several. Capacity errors in the operation (ZONE_RESOURCE_POOL_EXHAUSTED...) cool the
(type, zone, market) offerings down and the next machine type is tried. Idempotency: an instance labelled
``burstd-lease`` is looked up first, and every call carries a ``requestId`` UUID derived from the lease id
(and the machine type), so a retry after a crash returns the first operation instead of a second VM.

``launch_gang`` (a multi-node job, all or nothing) is ONE bulkInsert with ``count = minCount = n`` and the
location policy ``ANY_SINGLE_ZONE``: GCE makes all n in one zone or none. Every instance gets the same labels
and metadata (bulkInsert cannot vary them), so they carry a ``burstd-gang`` label and a ``burstd-members``
metadata item mapping each instance name to its node and lease; ``_to_instance`` reads a member's own entry,
and so does the node's bootstrap. The requestId derives from the gang id; instances found under the gang label
are returned by a repeat call, and fewer than n are never kept.

Operations are waited on through Zone/RegionOperationsClient built with the same client options: the
library's ExtendedOperation polling ignores a custom ``api_endpoint``.

Instance ids are ``<zone>/<name>``; names are ``<node>-<8 hex of the lease id>`` so a node relaunched while
its previous VM is still being deleted never collides.

The algorithm (lookup by lease, markets and on-demand fallback, cooled-down offerings, no capacity, gangs all or
nothing) is ``burstd.providers.cloud.CloudProvider``'s; this module holds only the Compute Engine calls and what
their answers mean (``create``: one bulkInsert per machine type, ``find_by_lease``, ``find_gang``; error codes in
``gcp/errors.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from burstd.config import CloudConfig, PoolConfig
from burstd.faults import crash_point
from burstd.domain.money import usd_to_micros
from burstd.providers.base import ErrorKind, Instance, LaunchRequest, Offering, ProviderError
from burstd.providers.bootstrap import render_startup_script
from burstd.providers.cloud import Ask, Attempt, CloudProvider
from burstd.providers.gcp.errors import classify, kind_of_code
from burstd.providers.offerings import OfferingCooldown

log = logging.getLogger("burstd.providers.gcp")

LABEL_CLUSTER = "burstd-cluster"
LABEL_POOL = "burstd-pool"
LABEL_NODE = "burstd-node"
LABEL_LEASE = "burstd-lease"
LABEL_GANG = "burstd-gang"  # instances launched together for one multi-node job
META_GANG = "burstd-gang"
META_MEMBERS = "burstd-members"  # gang instances: JSON {instance name: {"node": ..., "lease": ...}}
_UUID_NS = uuid.UUID("6f1c3c52-3b51-4f7e-9a55-4b0e7c2f7a10")  # burstd's namespace for requestIds
_STATE = {"PROVISIONING": "pending", "STAGING": "pending", "RUNNING": "running", "STOPPING": "stopping",
          "SUSPENDING": "stopping", "REPAIRING": "stopping", "SUSPENDED": "terminated", "STOPPED": "terminated",
          "TERMINATED": "terminated"}


def label_value(value: str) -> str:
    """GCE label values: lowercase letters, digits, ``_`` and ``-``, at most 63 characters."""
    out = re.sub(r"[^a-z0-9_-]", "_", value.lower())
    return out[:63]


def request_id(cluster_id: str, lease_id: str, what: str = "") -> str:
    """A stable UUID for one lease's request (GCE requestId must be a UUID)."""
    return str(uuid.uuid5(_UUID_NS, f"{cluster_id}/{lease_id}/{what}"))


def instance_name(node_name: str, lease_id: str) -> str:
    return f"{node_name}-{hashlib.sha256(lease_id.encode()).hexdigest()[:8]}"[:63]


def build_bulk_insert(
    *,
    cluster_id: str,
    pool: PoolConfig,
    request: LaunchRequest,
    machine_type: str,
    market: str,
    zones: list[str] | None,  # None: zonal call; else the regional location policy's allowed zones
    denied: Sequence[str] = (),
    startup_script: str,
) -> Any:
    """The BulkInsertInstanceResource for one node (pure; golden-tested)."""
    labels = {
        LABEL_CLUSTER: label_value(cluster_id),
        LABEL_POOL: label_value(pool.name),
        LABEL_NODE: label_value(request.node_name),
        LABEL_LEASE: label_value(request.lease_id),
    }
    meta = {"startup-script": startup_script, "burstd-node": request.node_name, "burstd-lease": request.lease_id,
            "burstd-cluster": cluster_id}
    return _bulk_resource(pool=pool, labels=labels, meta=meta, names=[instance_name(request.node_name, request.lease_id)],
                          machine_type=machine_type, market=market, zones=zones, denied=denied, target_shape="ANY")


def build_gang_bulk_insert(
    *,
    cluster_id: str,
    pool: PoolConfig,
    gang: str,
    requests: Sequence[LaunchRequest],
    machine_type: str,
    market: str,
    zones: list[str] | None,
    denied: Sequence[str] = (),
    startup_script: str,
) -> Any:
    """The BulkInsertInstanceResource for a gang: ``count = minCount = len(requests)``, all in one zone
    (location policy ``ANY_SINGLE_ZONE``), or none (pure; golden-tested).

    bulkInsert gives every instance the same labels and metadata, so the instances carry the gang label and
    the ``burstd-members`` metadata item maps each instance name to its node and lease."""
    labels = {LABEL_CLUSTER: label_value(cluster_id), LABEL_POOL: label_value(pool.name),
              LABEL_GANG: label_value(gang)}
    names = [instance_name(r.node_name, r.lease_id) for r in requests]
    members = {name: {"node": r.node_name, "lease": r.lease_id} for name, r in zip(names, requests)}
    meta = {"startup-script": startup_script, META_GANG: gang, META_MEMBERS: json.dumps(members, sort_keys=True),
            "burstd-cluster": cluster_id}
    return _bulk_resource(pool=pool, labels=labels, meta=meta, names=names, machine_type=machine_type,
                          market=market, zones=zones, denied=denied, target_shape="ANY_SINGLE_ZONE")


def _bulk_resource(*, pool: PoolConfig, labels: dict[str, str], meta: dict[str, str], names: list[str],
                   machine_type: str, market: str, zones: list[str] | None, denied: Sequence[str],
                   target_shape: str) -> Any:
    """``count = minCount = len(names)`` instances named ``names``, all with ``labels`` and ``meta``."""
    from google.cloud import compute_v1

    gcp = pool.gcp
    assert gcp is not None
    metadata = compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in meta.items()])
    if market == "spot":
        scheduling = compute_v1.Scheduling(
            provisioning_model="SPOT", instance_termination_action=gcp.termination_action,
            automatic_restart=False, on_host_maintenance="TERMINATE",
        )
    else:
        scheduling = compute_v1.Scheduling(provisioning_model="STANDARD", automatic_restart=True,
                                           on_host_maintenance="MIGRATE")
    props = compute_v1.InstanceProperties(labels=labels, metadata=metadata, scheduling=scheduling,
                                          machine_type=machine_type)
    if not gcp.instance_template:
        props.disks = [compute_v1.AttachedDisk(
            boot=True, auto_delete=True, type_="PERSISTENT",
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=gcp.image, disk_size_gb=gcp.boot_disk_gb, labels=labels),
        )]
        nic = compute_v1.NetworkInterface(network=gcp.network)
        if gcp.subnetwork:
            nic.subnetwork = gcp.subnetwork
        props.network_interfaces = [nic]
        props.service_accounts = [compute_v1.ServiceAccount(
            email=gcp.service_account or "default", scopes=["https://www.googleapis.com/auth/cloud-platform"])]
    resource = compute_v1.BulkInsertInstanceResource(
        count=len(names), min_count=len(names), instance_properties=props,
        per_instance_properties={n: compute_v1.BulkInsertInstanceResourcePerInstanceProperties() for n in names},
    )
    if gcp.instance_template:
        resource.source_instance_template = gcp.instance_template
    if zones is not None:
        locs = {f"zones/{z}": compute_v1.LocationPolicyLocation(preference="ALLOW") for z in zones}
        locs |= {f"zones/{z}": compute_v1.LocationPolicyLocation(preference="DENY") for z in denied}
        resource.location_policy = compute_v1.LocationPolicy(locations=locs, target_shape=target_shape)
    return resource


def _member(members_json: str | None, name: str) -> dict[str, str]:
    """A gang instance's own entry of its ``burstd-members`` metadata ({} when it has none)."""
    if not members_json:
        return {}
    try:
        entry = json.loads(members_json).get(name)
    except (ValueError, AttributeError):
        log.warning("instance %s: unreadable %s metadata", name, META_MEMBERS)
        return {}
    return entry if isinstance(entry, dict) else {}


class GcpProvider(CloudProvider):
    cloud_name = "gcp"

    def __init__(
        self,
        pool: PoolConfig,
        cluster_id: str,
        cloud: CloudConfig | None = None,
        cooldown: OfferingCooldown | None = None,
        *,
        credentials: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if pool.gcp is None:
            raise ProviderError(ErrorKind.CONFIG, f"pool {pool.name}: provider gcp needs a [pools.gcp] section")
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        super().__init__(pool, cluster_id, cloud, cooldown, sleep=sleep)
        self.gcp = pool.gcp
        self.project = self.gcp.project
        if credentials is None and self.gcp.anonymous_credentials:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        opts = ClientOptions(api_endpoint=self.gcp.api_endpoint) if self.gcp.api_endpoint else None
        kw = {"credentials": credentials, "client_options": opts, "transport": "rest"}
        try:
            self.instances = compute_v1.InstancesClient(**kw)
            self.region_instances = compute_v1.RegionInstancesClient(**kw)
            # Same options as the instance clients: ExtendedOperation polling would ignore api_endpoint.
            self.zone_ops = compute_v1.ZoneOperationsClient(**kw)
            self.region_ops = compute_v1.RegionOperationsClient(**kw)
        except Exception as exc:  # noqa: BLE001 - e.g. no default credentials
            raise classify(exc) from exc
        self._seen_preempted: dict[str, Instance] = {}

    # -- helpers -------------------------------------------------------------------------------------------

    def classify(self, exc: Exception) -> ProviderError:
        return classify(exc)

    @property
    def _kw(self) -> dict[str, Any]:
        return {"retry": None, "timeout": self.cloud.api_timeout_s}

    def startup_script(self) -> str:
        settings = {"BURSTD_CLOUD": "gcp", "BURSTD_MUNGE_SECRET": self.gcp.munge_key_secret,
                    "BURSTD_PROJECT": self.project, "BURSTD_CLUSTER": self.cluster_id}
        if self.gcp.conf_server:
            settings["BURSTD_CONF_SERVER"] = self.gcp.conf_server
        return render_startup_script(settings)

    def _filter(self, **labels: str) -> str:
        base = {LABEL_CLUSTER: label_value(self.cluster_id), LABEL_POOL: label_value(self.name)} | labels
        return " AND ".join(f'labels.{k} = "{v}"' for k, v in base.items())

    def _to_instance(self, raw: Any) -> Instance:
        zone = raw.zone.rsplit("/", 1)[-1]
        meta = {i.key: i.value for i in raw.metadata.items} if raw.metadata else {}
        labels = dict(raw.labels)
        spot = raw.scheduling.provisioning_model == "SPOT"
        state = _STATE.get(raw.status, raw.status.lower())
        # burstd never stops a VM: a spot VM that is TERMINATED (termination action STOP) was reclaimed.
        preempted = spot and raw.status == "TERMINATED"
        created = datetime.fromisoformat(raw.creation_timestamp).timestamp() if raw.creation_timestamp else 0.0
        nic = raw.network_interfaces[0].network_i_p if raw.network_interfaces else ""
        member = _member(meta.get(META_MEMBERS), raw.name)
        return Instance(
            instance_id=f"{zone}/{raw.name}",
            lease_id=member.get("lease") or meta.get("burstd-lease", labels.get(LABEL_LEASE, "")) or "",
            node_name=member.get("node") or meta.get("burstd-node", labels.get(LABEL_NODE, "")) or "",
            pool=self.name,
            state="preempted" if preempted else state,
            launched_at=created,
            offering=Offering(raw.machine_type.rsplit("/", 1)[-1], zone, "spot" if spot else "on-demand"),
            address=nic,
            preempted=preempted,
        )

    def _aggregated(self, flt: str) -> list[Any]:
        from google.cloud import compute_v1

        def run() -> list[Any]:
            req = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=flt)
            out: list[Any] = []
            for _scope, scoped in self.instances.aggregated_list(request=req, **self._kw):
                out.extend(scoped.instances)
            return out

        return self._call("instances.aggregatedList", run)

    def find_by_lease(self, lease_id: str) -> Instance | None:
        found = [self._to_instance(r) for r in self._aggregated(self._filter(**{LABEL_LEASE: label_value(lease_id)}))]
        found = [i for i in found if i.lease_id == lease_id and not i.is_gone]
        return sorted(found, key=lambda i: (i.launched_at, i.instance_id))[0] if found else None

    def _zone_operations(self, req: Any) -> list[Any]:
        return list(self.zone_ops.list(request=req, **self._kw))

    def wait(self, op: Any, zone: str | None, region: str | None) -> Any:
        deadline = time.monotonic() + self.cloud.operation_timeout_s
        while op.status != type(op).Status.DONE:
            if time.monotonic() > deadline:
                raise ProviderError(ErrorKind.TRANSIENT, f"operation {op.name} not done after "
                                    f"{self.cloud.operation_timeout_s:.0f}s", code="OperationTimeout")
            if zone:
                op = self._call("zoneOperations.wait", partial(
                    self.zone_ops.wait, project=self.project, zone=zone, operation=op.name, **self._kw))
            else:
                op = self._call("regionOperations.wait", partial(
                    self.region_ops.wait, project=self.project, region=region, operation=op.name, **self._kw))
        return op

    # -- the launch skeleton's hooks (burstd.providers.cloud) ---------------------------------------------------

    def offerings(self, market: str) -> list[Offering]:
        return [Offering(t.name, z, market) for t in self.pool.instance_types for z in self.gcp.zones]

    def groups(self, choices: list[Offering]) -> list[list[Offering]]:
        """One bulkInsert per machine type, in config order, over the zones of it still usable."""
        by_type: dict[str, list[Offering]] = {}
        for o in choices:
            by_type.setdefault(o.instance_type, []).append(o)
        return list(by_type.values())

    def create(self, ask: Ask) -> Attempt:
        """One bulkInsert of ``ask.offerings[0].instance_type`` in ``ask.offerings``' zones: zonal with one zone in
        the pool, else regional with a location policy (the pool's other zones DENY). Its operation's errors
        classified: all capacity -> those offerings cool down; anything else is raised."""
        from google.cloud import compute_v1

        mt = ask.offerings[0].instance_type
        ok = [o.zone for o in ask.offerings]
        regional = len(self.gcp.zones) > 1
        script = self.startup_script()
        common: dict[str, Any] = {
            "cluster_id": self.cluster_id, "pool": self.pool, "startup_script": script, "machine_type": mt,
            "market": ask.market, "zones": ok if regional else None, "denied": [z for z in self.gcp.zones if z not in ok]}
        offer = f"{ask.market}/{mt}/{','.join(ok)}"
        if ask.gang is None:
            request = ask.requests[0]
            resource = build_bulk_insert(request=request, **common)
            rid = request_id(self.cluster_id, request.lease_id, offer)
        else:
            resource = build_gang_bulk_insert(gang=ask.gang, requests=ask.requests, **common)
            # The requestId covers the leases asked for, and after a half gang is deleted, what was deleted: the
            # first requestId would be answered with the operation that made what is now gone.
            key = "/" + hashlib.sha256(",".join(sorted(r.lease_id for r in ask.requests)).encode()).hexdigest()[:16]
            if ask.released:
                key += "/after:" + ",".join(ask.released)
            rid = request_id(self.cluster_id, f"gang/{ask.gang}", offer + key)
        if regional:
            req = compute_v1.BulkInsertRegionInstanceRequest(
                project=self.project, region=self.gcp.region,
                bulk_insert_instance_resource_resource=resource, request_id=rid)
            op = self._call("regionInstances.bulkInsert", partial(
                self.region_instances.bulk_insert_unary, request=req, **self._kw))
            crash_point("gcp.bulk_insert.unanswered")
            op = self.wait(op, None, self.gcp.region)
        else:
            req = compute_v1.BulkInsertInstanceRequest(
                project=self.project, zone=ok[0], bulk_insert_instance_resource_resource=resource,
                request_id=rid)
            op = self._call("instances.bulkInsert", partial(
                self.instances.bulk_insert_unary, request=req, **self._kw))
            crash_point("gcp.bulk_insert.unanswered")
            op = self.wait(op, ok[0], None)
        errors = list(op.error.errors) if op.error else []
        if errors:
            codes = [e.code for e in errors]
            kinds = [kind_of_code(c) for c in codes]
            attempt = Attempt(failures=[f"{ask.market} {mt} in {','.join(ok)}: {','.join(codes)}"])
            if all(k is ErrorKind.CAPACITY for k in kinds):
                attempt.exhausted = {o: codes[0] for o in ask.offerings}
                return attempt
            worst = next((k for k in (ErrorKind.CONFIG, ErrorKind.QUOTA, ErrorKind.THROTTLED,
                                      ErrorKind.TRANSIENT) if k in kinds), ErrorKind.CONFIG)
            i = kinds.index(worst)
            raise ProviderError(worst, errors[i].message, code=codes[i])
        if ask.gang is not None:  # the list may lag the operation a moment; fewer than all: the skeleton releases
            n, gang = len(ask.requests), ask.gang
            return Attempt(made=self._listed(lambda: self.find_gang(gang, ask.requests), lambda f: len(f) == n))
        lease_id = ask.requests[0].lease_id
        inst = self._listed(lambda: self.find_by_lease(lease_id), lambda i: i is not None)
        if inst is None:
            raise ProviderError(ErrorKind.TRANSIENT, f"bulkInsert for lease {lease_id} finished "
                                "but no instance carries its label", code="InstanceNotListed")
        return Attempt(made=[inst])

    def _listed(self, find: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
        """``find()`` until ``done`` of it (the list may lag the operation a moment); the last answer."""
        found = find()
        for _ in range(self.retry.attempts - 1):
            if done(found):
                break
            self._sleep(self.retry.delay(0))
            found = find()
        return found

    def find_gang(self, gang: str, requests: Sequence[LaunchRequest]) -> list[Instance]:
        """The live gang instances made for one of ``requests`` (its own name, for its own lease): one made for a
        lease no longer asked for (a member failed in between) is left to orphan collection."""
        want = {instance_name(r.node_name, r.lease_id): r.lease_id for r in requests}
        found = [self._to_instance(r) for r in self._aggregated(self._filter(**{LABEL_GANG: label_value(gang)}))]
        return [i for i in found if not i.is_gone and want.get(i.instance_id.rsplit("/", 1)[-1]) == i.lease_id]

    # -- Provider ------------------------------------------------------------------------------------------

    def terminate(self, instance_ids: list[str]) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        for iid in dict.fromkeys(instance_ids):
            zone, _, name = iid.partition("/")
            if not name:
                raise ProviderError(ErrorKind.CONFIG, f"gcp instance id {iid!r} is not <zone>/<name>")
            req = compute_v1.DeleteInstanceRequest(project=self.project, zone=zone, instance=name,
                                                   request_id=request_id(self.cluster_id, iid, "delete"))

            def run(req=req):
                try:
                    return self.instances.delete_unary(request=req, **self._kw)
                except gexc.NotFound:
                    return None  # already gone: fine

            if self._call("instances.delete", run) is not None:  # accepted (not already gone)
                crash_point("gcp.delete.unanswered")
            log.info("gcp pool %s: delete asked for %s", self.name, iid)

    def preempted_since_last_look(self) -> list[Instance]:
        """Spot VMs the provider reclaimed (compute.instances.preempted operations), including deleted ones."""
        from google.cloud import compute_v1

        out = []
        for zone in self.gcp.zones:
            req = compute_v1.ListZoneOperationsRequest(
                project=self.project, zone=zone, filter='operationType = "compute.instances.preempted"')
            ops = self._call("zoneOperations.list", partial(self._zone_operations, req))
            for op in ops:
                name = op.target_link.rsplit("/", 1)[-1]
                iid = f"{zone}/{name}"
                if iid not in self._seen_preempted:
                    when = datetime.fromisoformat(op.insert_time).timestamp() if op.insert_time else 0.0
                    self._seen_preempted[iid] = Instance(
                        instance_id=iid, lease_id="", node_name="", pool=self.name, state="preempted",
                        launched_at=when, preempted=True, extra={"operation": op.name})
                out.append(self._seen_preempted[iid])
        return out

    def list_instances(self) -> list[Instance]:
        listed = [self._to_instance(r) for r in self._aggregated(self._filter())]
        ids = {i.instance_id for i in listed}
        gone = [p for p in self.preempted_since_last_look() if p.instance_id not in ids]
        return listed + gone

    def prices(self) -> dict[Offering, int]:
        """From the config (GCE publishes spot prices only through the Cloud Billing catalog)."""
        out: dict[Offering, int] = {}
        for t in self.pool.instance_types:
            spot = t.price_per_hour if t.price_per_hour is not None else self.pool.price_per_hour
            for z in self.gcp.zones:
                out[Offering(t.name, z, self.pool.market)] = usd_to_micros(spot)
                if self.pool.ondemand_price_per_hour is not None and self.pool.market == "spot":
                    out[Offering(t.name, z, "on-demand")] = usd_to_micros(self.pool.ondemand_price_per_hour)
        return out

    def close(self) -> None:
        for client in (self.instances, self.region_instances, self.zone_ops, self.region_ops):
            try:
                client.transport.close()
            except Exception:  # noqa: BLE001
                pass
