"""The AWS provider: one burstd pool on EC2.

    provider = AwsProvider(pool_config, cluster_id="site1", cloud=config.cloud, cooldown=shared_cooldown)
    inst = provider.launch(LaunchRequest(lease_id="L1", node_name="aws-1", pool="aws"))

``launch`` asks for one node with an EC2 Fleet of type ``instant`` over every offering (instance type x subnet)
not cooling down; the fleet picks by its allocation strategy. Per-offering capacity errors in the fleet's answer
cool those offerings down (shared ``OfferingCooldown``), so the next launch goes elsewhere at once. Idempotency:
an instance already tagged ``burstd:lease=<lease id>`` is returned as is, and the fleet carries a ``ClientToken``
derived from the lease id, so a crash between the call and its answer never makes a second VM.

The algorithm (lookup by lease, markets and on-demand fallback, cooled-down offerings, no capacity, gangs all or
nothing) is ``burstd.providers.cloud.CloudProvider``'s; this module holds only the EC2 calls and what their
answers mean (``create``, ``find_by_lease``, ``find_gang``, ``bind_gang``; error codes in ``aws/errors.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from burstd.config import CloudConfig, PoolConfig
from burstd.faults import crash_point
from burstd.domain.money import usd_to_micros
from burstd.providers.aws.errors import classify, kind_of_code
from burstd.providers.base import ErrorKind, Instance, LaunchRequest, Offering, ProviderError
from burstd.providers.bootstrap import render_startup_script
from burstd.providers.cloud import Ask, Attempt, CloudProvider
from burstd.providers.offerings import OfferingCooldown

log = logging.getLogger("burstd.providers.aws")

TAG_CLUSTER = "burstd:cluster"
TAG_POOL = "burstd:pool"
TAG_NODE = "burstd:node"
TAG_LEASE = "burstd:lease"
TAG_GANG = "burstd:gang"  # instances launched together for one multi-node job
#: State reasons that mean the provider took the instance back (spot reclaim).
PREEMPT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")
_STATE = {"pending": "pending", "running": "running", "stopping": "stopping", "stopped": "stopping",
          "shutting-down": "stopping", "terminated": "terminated"}


def client_token(lease_id: str, market: str, overrides: list[dict[str, Any]]) -> str:
    """The fleet's ClientToken: the lease id plus a digest of what is asked (<= 64 chars, as EC2 requires).

    The same lease asking for the same thing gets the same token (EC2 returns the first answer); a changed
    request (another market, offerings cooled down) gets a new one instead of IdempotentParameterMismatch.
    The tag lookup before every launch covers that case.
    """
    digest = hashlib.sha256(json.dumps([market, overrides], sort_keys=True).encode()).hexdigest()[:12]
    return f"{lease_id[:50]}-{digest}"


def instance_tags(cluster_id: str, pool: str, request: LaunchRequest) -> list[dict[str, str]]:
    return [
        {"Key": "Name", "Value": request.node_name},
        {"Key": TAG_CLUSTER, "Value": cluster_id},
        {"Key": TAG_POOL, "Value": pool},
        {"Key": TAG_NODE, "Value": request.node_name},
        {"Key": TAG_LEASE, "Value": request.lease_id},
    ]


def build_fleet_request(
    *,
    cluster_id: str,
    request: LaunchRequest,
    market: str,
    offerings: list[tuple[Offering, str]],  # (offering, subnet id)
    launch_template: dict[str, str],
    allocation_strategy: str,
    max_price: float | None = None,
) -> dict[str, Any]:
    """The CreateFleet body for one node (pure; golden-tested)."""
    return _fleet_body(token_of=request.lease_id, tags=instance_tags(cluster_id, request.pool, request), count=1,
                       all_or_nothing=False, market=market, offerings=offerings, launch_template=launch_template,
                       allocation_strategy=allocation_strategy, max_price=max_price)


def build_gang_fleet_request(
    *,
    cluster_id: str,
    pool: str,
    gang: str,
    count: int,
    market: str,
    offerings: list[tuple[Offering, str]],
    launch_template: dict[str, str],
    allocation_strategy: str,
    max_price: float | None = None,
) -> dict[str, Any]:
    """The CreateFleet body for a gang of ``count`` nodes, all or nothing in one AZ (pure; golden-tested).

    The instances carry the gang tag only: which node and lease each one is gets tagged right after the
    answer (one fleet cannot tag its instances differently)."""
    tags = [{"Key": "Name", "Value": f"burstd-gang-{gang[:16]}"}, {"Key": TAG_CLUSTER, "Value": cluster_id},
            {"Key": TAG_POOL, "Value": pool}, {"Key": TAG_GANG, "Value": gang}]
    return _fleet_body(token_of=gang, tags=tags, count=count, all_or_nothing=True, market=market,
                       offerings=offerings, launch_template=launch_template,
                       allocation_strategy=allocation_strategy, max_price=max_price)


def _fleet_body(*, token_of: str, tags: list[dict[str, str]], count: int, all_or_nothing: bool, market: str,
                offerings: list[tuple[Offering, str]], launch_template: dict[str, str], allocation_strategy: str,
                max_price: float | None) -> dict[str, Any]:
    overrides: list[dict[str, Any]] = []
    for priority, (offering, subnet) in enumerate(offerings):
        o: dict[str, Any] = {"InstanceType": offering.instance_type, "SubnetId": subnet}
        if allocation_strategy == "prioritized":
            o["Priority"] = float(priority)
        if market == "spot" and max_price is not None:
            o["MaxPrice"] = f"{max_price:.5f}"
        overrides.append(o)
    body: dict[str, Any] = {
        "ClientToken": client_token(token_of, market, overrides),
        "Type": "instant",
        "TargetCapacitySpecification": {"TotalTargetCapacity": count, "DefaultTargetCapacityType": market},
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": dict(launch_template), "Overrides": overrides}],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
            {"ResourceType": "fleet", "Tags": tags},
        ],
    }
    # MinTargetCapacity: EC2 launches nothing unless it can launch all; it needs one AZ (or one type).
    floor = {"MinTargetCapacity": count, "SingleAvailabilityZone": True} if all_or_nothing else {}
    if market == "spot":
        strategy = "lowest-price" if allocation_strategy == "prioritized" else allocation_strategy
        body["SpotOptions"] = {"AllocationStrategy": strategy, "InstanceInterruptionBehavior": "terminate", **floor}
    else:
        od = "prioritized" if allocation_strategy == "prioritized" else "lowest-price"
        body["OnDemandOptions"] = {"AllocationStrategy": od, **floor}
    return body


def newest_spot_prices(rows: Sequence[dict[str, Any]], zones: Sequence[str]) -> dict[Offering, int]:
    """The newest ``SpotPrice`` per (instance type, AZ) among ``zones``, micro-dollars (pure). A price that is
    not a finite amount raises ``ValueError`` (the daemon refuses it rather than guess)."""
    latest: dict[Offering, tuple[float, str]] = {}
    for row in rows:
        if row["AvailabilityZone"] not in zones:
            continue
        key = Offering(row["InstanceType"], row["AvailabilityZone"], "spot")
        ts = row["Timestamp"].timestamp()
        if key not in latest or ts > latest[key][0]:
            latest[key] = (ts, row["SpotPrice"])
    return {key: usd_to_micros(price) for key, (_, price) in latest.items()}


class AwsProvider(CloudProvider):
    cloud_name = "aws"

    def __init__(
        self,
        pool: PoolConfig,
        cluster_id: str,
        cloud: CloudConfig | None = None,
        cooldown: OfferingCooldown | None = None,
        *,
        session: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if pool.aws is None:
            raise ProviderError(ErrorKind.CONFIG, f"pool {pool.name}: provider aws needs a [pools.aws] section")
        import boto3
        from botocore.config import Config as BotoConfig

        super().__init__(pool, cluster_id, cloud, cooldown, sleep=sleep)
        self.aws = pool.aws
        if self.aws.launch_template is None and self.aws.image_id is None:
            raise ProviderError(ErrorKind.CONFIG, f"pool {pool.name}: aws needs launch_template or image_id")
        botocfg = BotoConfig(
            region_name=self.aws.region,
            retries={"total_max_attempts": 1},  # we retry ourselves, with the policy from the config
            connect_timeout=min(10.0, self.cloud.api_timeout_s),
            read_timeout=self.cloud.api_timeout_s,
        )
        session = session or boto3.session.Session()
        self.ec2 = session.client("ec2", endpoint_url=self.aws.endpoint_url, config=botocfg)
        self._subnet_zone: dict[str, str] | None = None
        self._template: dict[str, str] | None = None
        self._volumes: dict[str, list[str]] = {}  # gang instance -> its EBS volumes, until bind_gang tags them

    # -- helpers -------------------------------------------------------------------------------------------

    def classify(self, exc: Exception) -> ProviderError:
        return classify(exc)

    def subnet_zones(self) -> dict[str, str]:
        if self._subnet_zone is None:
            resp = self._call("DescribeSubnets", lambda: self.ec2.describe_subnets(SubnetIds=list(self.aws.subnets)))
            zones = {s["SubnetId"]: s["AvailabilityZone"] for s in resp["Subnets"]}
            missing = [s for s in self.aws.subnets if s not in zones]
            if missing:
                raise ProviderError(ErrorKind.CONFIG, f"pool {self.name}: unknown subnet(s) {', '.join(missing)}")
            self._subnet_zone = zones
        return self._subnet_zone

    def subnet_offerings(self, market: str) -> list[tuple[Offering, str]]:
        """Every (offering, subnet) of the pool, in config order (types first, then subnets)."""
        zones = self.subnet_zones()
        return [
            (Offering(t.name, zones[s], market), s) for t in self.pool.instance_types for s in self.aws.subnets
        ]

    def user_data(self) -> str:
        settings = {"BURSTD_CLOUD": "aws", "BURSTD_MUNGE_SECRET": self.aws.munge_key_secret,
                    "BURSTD_REGION": self.aws.region, "BURSTD_CLUSTER": self.cluster_id}
        if self.aws.conf_server:
            settings["BURSTD_CONF_SERVER"] = self.aws.conf_server
        return render_startup_script(settings)

    def launch_template_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "ImageId": self.aws.image_id,
            "UserData": base64.b64encode(self.user_data().encode()).decode(),
            # IMDSv2 only; tags readable from IMDS so the node learns its name without a describe call.
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled",
                                "HttpPutResponseHopLimit": 1, "InstanceMetadataTags": "enabled"},
        }
        if self.aws.instance_profile:
            key = "Arn" if self.aws.instance_profile.startswith("arn:") else "Name"
            data["IamInstanceProfile"] = {key: self.aws.instance_profile}
        if self.aws.security_groups:
            data["SecurityGroupIds"] = list(self.aws.security_groups)
        if self.aws.root_volume_gb:
            data["BlockDeviceMappings"] = [{"DeviceName": "/dev/xvda", "Ebs": {
                "VolumeSize": self.aws.root_volume_gb, "VolumeType": "gp3", "DeleteOnTermination": True}}]
        return data

    def launch_template(self) -> dict[str, str]:
        """The template to launch from: the configured one, or burstd's own (created once, named by content)."""
        if self._template is not None:
            return self._template
        if self.aws.launch_template:
            key = "LaunchTemplateId" if self.aws.launch_template.startswith("lt-") else "LaunchTemplateName"
            self._template = {key: self.aws.launch_template, "Version": self.aws.launch_template_version}
            return self._template
        data = self.launch_template_data()
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
        name = f"burstd-{self.cluster_id}-{self.name}-{digest}"[:128]
        try:
            self._call("DescribeLaunchTemplates", lambda: self.ec2.describe_launch_templates(LaunchTemplateNames=[name]))
        except ProviderError as exc:
            if not exc.code.startswith("InvalidLaunchTemplateName.NotFound"):
                raise
            tags = [{"Key": TAG_CLUSTER, "Value": self.cluster_id}, {"Key": TAG_POOL, "Value": self.name}]
            try:
                self._call("CreateLaunchTemplate", lambda: self.ec2.create_launch_template(
                    LaunchTemplateName=name, LaunchTemplateData=data,
                    TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
                ))
                log.info("aws pool %s: created launch template %s", self.name, name)
            except ProviderError as exc2:
                if "AlreadyExists" not in exc2.code:
                    raise
        self._template = {"LaunchTemplateName": name, "Version": "$Latest"}
        return self._template

    def _describe(self, **kwargs: Any) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            out = []
            for page in self.ec2.get_paginator("describe_instances").paginate(**kwargs):
                for res in page["Reservations"]:
                    out.extend(res["Instances"])
            return out

        return self._call("DescribeInstances", run)

    def _to_instance(self, raw: dict[str, Any]) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        reason = (raw.get("StateReason") or {}).get("Code", "")
        preempted = raw.get("InstanceLifecycle") == "spot" and reason.startswith(PREEMPT_REASONS)
        state = _STATE.get(raw["State"]["Name"], raw["State"]["Name"])
        if preempted and state in ("terminated", "stopping"):
            state = "preempted"
        market = "spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand"
        extra = {"state_reason": reason} if reason else {}
        if TAG_GANG in tags:  # a gang member not yet tagged with its lease is no orphan while the gang launches
            extra["gang"] = tags[TAG_GANG]
        return Instance(
            instance_id=raw["InstanceId"],
            lease_id=tags.get(TAG_LEASE, ""),
            node_name=tags.get(TAG_NODE, ""),
            pool=tags.get(TAG_POOL, self.name),
            state=state,
            launched_at=raw["LaunchTime"].timestamp(),
            offering=Offering(raw["InstanceType"], raw.get("Placement", {}).get("AvailabilityZone", ""), market),
            address=raw.get("PrivateIpAddress", ""),
            preempted=preempted,
            extra=extra,
        )

    def _tag_filters(self) -> list[dict[str, Any]]:
        return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_id]},
                {"Name": f"tag:{TAG_POOL}", "Values": [self.name]}]

    def find_by_lease(self, lease_id: str) -> Instance | None:
        raws = self._describe(Filters=self._tag_filters() + [
            {"Name": f"tag:{TAG_LEASE}", "Values": [lease_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ])
        found = sorted((self._to_instance(r) for r in raws), key=lambda i: (i.launched_at, i.instance_id))
        return found[0] if found else None

    # -- the launch skeleton's hooks (burstd.providers.cloud) ---------------------------------------------------

    def offerings(self, market: str) -> list[Offering]:
        return list(dict.fromkeys(o for o, _ in self.subnet_offerings(market)))

    def find_gang(self, gang: str, requests: Sequence[LaunchRequest]) -> list[Instance]:
        # ours: unlabelled, or labelled with one of these leases (a member labelled for another lease is not)
        leases = {r.lease_id for r in requests} | {""}
        return [i for i in self._with_volumes(self._gang_instances(gang)) if i.lease_id in leases]

    def create(self, ask: Ask) -> Attempt:
        """One EC2 Fleet (``instant``) over every (type x subnet) of ``ask.offerings``; its per-override errors
        classified: capacity ones name the offering to cool down, the worst other one is kept."""
        group = set(ask.offerings)
        choices = [(o, s) for o, s in self.subnet_offerings(ask.market) if o in group]
        template = self.launch_template()
        common: dict[str, Any] = {
            "cluster_id": self.cluster_id, "market": ask.market, "offerings": choices, "launch_template": template,
            "allocation_strategy": self.aws.allocation_strategy, "max_price": self.aws.spot_max_price}
        if ask.gang is None:
            body = build_fleet_request(request=ask.requests[0], **common)
        else:
            body = build_gang_fleet_request(pool=self.name, gang=ask.gang, count=len(ask.requests), **common)
        resp = self._call("CreateFleet", lambda: self.ec2.create_fleet(**body))
        crash_point("aws.create_fleet.unanswered")
        attempt = Attempt()
        by_key = {(o.instance_type, s): o for o, s in choices}
        for err in resp.get("Errors", []):
            ov = (err.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            offering = by_key.get((str(ov.get("InstanceType")), str(ov.get("SubnetId"))))
            code = err.get("ErrorCode", "Unknown")
            kind = kind_of_code(code)
            if kind is ErrorKind.CAPACITY:  # the fleet did not say which: every offering it was offered
                for o in [offering] if offering is not None else ask.offerings:
                    attempt.exhausted.setdefault(o, code)
            elif attempt.error is None or kind in (ErrorKind.CONFIG, ErrorKind.QUOTA):
                attempt.error = ProviderError(kind, err.get("ErrorMessage", ""), code=code, offering=offering)
            attempt.failures.append(f"{ask.market} {ov.get('InstanceType', '?')}/{ov.get('SubnetId', '?')}: {code}")
        ids = [i for group_ in resp.get("Instances", []) for i in group_.get("InstanceIds", [])]
        if ids:
            raws = self._describe(InstanceIds=ids)
            insts = self._with_volumes(raws) if ask.gang is not None else [self._to_instance(r) for r in raws]
            made = {i.instance_id: i for i in insts}
            attempt.made = [made[i] for i in ids if i in made]
        return attempt

    def bind_gang(self, gang: str, requests: Sequence[LaunchRequest], made: list[Instance]) -> list[Instance]:
        """Tag each gang instance (and its volumes) with its node and lease; instances tagged by an earlier
        call keep theirs. Returns one instance per request, in request order."""
        leases = {r.lease_id for r in requests}
        by_lease = {i.lease_id: i for i in made if i.lease_id in leases}
        free = sorted((i for i in made if not i.lease_id), key=lambda i: i.instance_id)
        out: list[Instance] = []
        tagged = 0
        for request in requests:
            inst = by_lease.get(request.lease_id)
            if inst is None:
                inst = free.pop(0)
                tags = instance_tags(self.cluster_id, self.name, request) + [{"Key": TAG_GANG, "Value": gang}]
                resources = [inst.instance_id, *self._volumes.pop(inst.instance_id, [])]  # its EBS volumes too
                if tagged:  # a crash here leaves the gang half tagged: the relaunch must finish it, not leak it
                    crash_point("aws.gang_tags.half_done")
                # _call runs the closure (and its retries) at once, before the loop moves on
                self._call("CreateTags", lambda: self.ec2.create_tags(Resources=resources, Tags=tags))
                tagged += 1
                inst = replace(inst, lease_id=request.lease_id, node_name=request.node_name)
            out.append(inst)
        for inst in made:
            self._volumes.pop(inst.instance_id, None)
        log.info("aws pool %s: gang %s -> %s", self.name, gang,
                 ", ".join(f"{i.node_name}={i.instance_id}" for i in out))
        return out

    def _gang_instances(self, gang: str) -> list[dict[str, Any]]:
        return self._describe(Filters=self._tag_filters() + [
            {"Name": f"tag:{TAG_GANG}", "Values": [gang]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ])

    def _with_volumes(self, raws: list[dict[str, Any]]) -> list[Instance]:
        """Instances of ``raws``, their EBS volumes remembered for ``bind_gang`` (tagged with the instance)."""
        out = []
        for r in raws:
            self._volumes[r["InstanceId"]] = [m["Ebs"]["VolumeId"] for m in r.get("BlockDeviceMappings", [])
                                              if "Ebs" in m]
            out.append(self._to_instance(r))
        return out

    # -- Provider ------------------------------------------------------------------------------------------

    def terminate(self, instance_ids: list[str]) -> None:
        ids = list(dict.fromkeys(instance_ids))
        for start in range(0, len(ids), self.cloud.terminate_batch):
            batch = ids[start:start + self.cloud.terminate_batch]
            try:
                self._call("TerminateInstances", lambda: self.ec2.terminate_instances(InstanceIds=batch))
                crash_point("aws.terminate.unanswered")
            except ProviderError as exc:
                if not exc.code.startswith(("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed")):
                    raise
                # One gone id fails the whole call: go one by one, gone ones are fine (idempotent).
                for iid in batch:
                    try:
                        self._call("TerminateInstances", lambda: self.ec2.terminate_instances(InstanceIds=[iid]))
                    except ProviderError as one:
                        if not one.code.startswith("InvalidInstanceID"):
                            raise
            log.info("aws pool %s: terminate asked for %s", self.name, ", ".join(batch))

    def list_instances(self) -> list[Instance]:
        return [self._to_instance(r) for r in self._describe(Filters=self._tag_filters())]

    def prices(self) -> dict[Offering, int]:
        """On-demand from the config; spot from DescribeSpotPriceHistory (the newest price per type and AZ of
        the pool's subnets). The daemon calls this through ``burstd.daemon.prices`` (cached), nowhere else."""
        out: dict[Offering, int] = {}
        ondemand = self.pool.ondemand_price_per_hour
        zones = sorted(set(self.subnet_zones().values()))
        for t in self.pool.instance_types:
            od = t.price_per_hour if t.price_per_hour is not None and self.pool.market == "on-demand" else ondemand
            if od is not None:
                for z in zones:
                    out[Offering(t.name, z, "on-demand")] = usd_to_micros(od)

        def history() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = []
            kwargs: dict[str, Any] = {"InstanceTypes": [t.name for t in self.pool.instance_types],
                                      "ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
                                      "StartTime": time.time()}
            while True:  # by hand, not a paginator: one client call a page, which the tests can count
                page = self.ec2.describe_spot_price_history(**kwargs)
                rows.extend(page["SpotPriceHistory"])
                if not page.get("NextToken"):
                    return rows
                kwargs["NextToken"] = page["NextToken"]

        out.update(newest_spot_prices(self._call("DescribeSpotPriceHistory", history), zones))
        return out

    def close(self) -> None:
        self.ec2.close()
