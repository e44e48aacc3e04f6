"""The AWS provider against a real moto server over HTTP (real boto3), with injected faults."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from burstd.config import CloudConfig, PoolConfig
from burstd.providers.aws import AwsProvider
from burstd.providers.base import ErrorKind, LaunchRequest, Offering, ProviderError
from burstd.providers.offerings import OfferingCooldown
from tests.fakes.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY, aws_env, moto_server  # noqa: F401

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
MUNGE_KEY = "c2VjcmV0LW11bmdlLWtleS1uZXZlci1zaG93LW1l"  # what the secret would hold; must appear nowhere
FAST = CloudConfig(api_attempts=4, retry_base_s=0.001, retry_max_s=0.01, api_timeout_s=5, capacity_cooldown_s=300)


def pool_config(env, ondemand_fallback: bool = False, **aws) -> PoolConfig:
    ec2 = env.client(direct=True)
    subnets = sorted(ec2.describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"])[:2]
    section = {
        "region": "us-east-1",
        "subnets": [s["SubnetId"] for s in subnets],
        "image_id": "ami-12c6146b",
        "endpoint_url": env.url,
        "conf_server": "10.0.0.1:6817",
        "instance_profile": "burstd-node",
        "security_groups": ["sg-0123456789abcdef0"],
        "munge_key_secret": "burstd/munge-key",
    } | aws
    return PoolConfig.model_validate({
        "name": "aws", "provider": "aws", "partition": "cloud-aws", "node_prefix": "aws-", "node_count": 8,
        "price_per_hour": 0.05, "ondemand_price_per_hour": 0.2, "ondemand_fallback": ondemand_fallback,
        "instance_types": [{"name": "m5.large", "cpus": 2, "memory_mb": 7000},
                           {"name": "c5.large", "cpus": 2, "memory_mb": 3500}],
        "aws": section,
    })


def make(env, cloud=FAST, cooldown=None, **aws) -> AwsProvider:
    return AwsProvider(pool_config(env, **aws), "site1", cloud, cooldown or OfferingCooldown(cloud.capacity_cooldown_s),
                       session=env.session(), sleep=lambda s: None)


def live(env, lease: str | None = None) -> list[dict]:
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    if lease:
        filters.append({"Name": "tag:burstd:lease", "Values": [lease]})
    res = env.client(direct=True).describe_instances(Filters=filters)["Reservations"]
    return [i for r in res for i in r["Instances"]]


def zones(p: AwsProvider) -> list[str]:
    return [p.subnet_zones()[s] for s in p.aws.subnets]


def test_launch_creates_one_tagged_spot_instance_from_a_template_with_bootstrap_user_data(aws_env):
    p = make(aws_env)
    inst = p.launch(LaunchRequest(lease_id="lease-0001", node_name="aws-1", pool="aws"))
    raw = live(aws_env)
    assert [i["InstanceId"] for i in raw] == [inst.instance_id]
    tags = {t["Key"]: t["Value"] for t in raw[0]["Tags"]}
    assert tags["burstd:cluster"] == "site1" and tags["burstd:node"] == "aws-1" and tags["burstd:lease"] == "lease-0001"
    assert raw[0]["InstanceLifecycle"] == "spot"
    assert inst.lease_id == "lease-0001" and inst.node_name == "aws-1" and inst.state == "running"
    assert inst.offering == Offering("m5.large", zones(p)[0], "spot")
    ud = aws_env.client(direct=True).describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
    import base64
    script = base64.b64decode(ud["UserData"]["Value"]).decode()
    assert "export BURSTD_MUNGE_SECRET=burstd/munge-key" in script and "--conf-server" in script
    lt = aws_env.client(direct=True).describe_launch_template_versions(LaunchTemplateName=p.launch_template()["LaunchTemplateName"])
    meta = lt["LaunchTemplateVersions"][0]["LaunchTemplateData"]["MetadataOptions"]
    assert meta["HttpTokens"] == "required" and meta["InstanceMetadataTags"] == "enabled"


def test_create_fleet_body_matches_golden(aws_env):
    p = make(aws_env)
    sent: list[dict] = []
    p.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", lambda params, **_: sent.append(params))
    p.launch(LaunchRequest(lease_id="lease-golden", node_name="aws-3", pool="aws"))
    subnets = list(p.aws.subnets)
    body = json.loads(json.dumps(sent[0]).replace(subnets[0], "SUBNET_A").replace(subnets[1], "SUBNET_B")
                      .replace(p.launch_template()["LaunchTemplateName"], "burstd-site1-aws-<digest of its data>"))
    token = body["ClientToken"]
    assert token.startswith("lease-golden-") and len(token) <= 64  # the digest depends on the subnet ids
    body["ClientToken"] = "lease-golden-<digest>"
    path = GOLDEN / "aws_create_fleet.json"
    if os.environ.get("BURSTD_UPDATE_GOLDEN"):
        path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    assert body == json.loads(path.read_text())
    # What reached the wire is the same request (the proxy saw it, ClientToken included).
    assert aws_env.faults.fleet_requests[0]["ClientToken"] == token


def test_capacity_error_on_first_offering_lands_on_the_next_and_cools_it_down(aws_env):
    cooldown = OfferingCooldown(300)
    p = make(aws_env, cooldown=cooldown)
    first = Offering("m5.large", zones(p)[0], "spot")
    aws_env.faults.exhaust("m5.large", first.zone)
    inst = p.launch(LaunchRequest(lease_id="lease-a", node_name="aws-1", pool="aws"))
    assert inst.offering == Offering("m5.large", zones(p)[1], "spot")
    assert cooldown.is_cooling(first)
    # The next launch does not even offer the cooled-down offering to EC2.
    p.launch(LaunchRequest(lease_id="lease-b", node_name="aws-2", pool="aws"))
    second = aws_env.faults.fleet_requests[-1]
    offered = {(v, second[k.replace("InstanceType", "SubnetId")]) for k, v in second.items() if k.endswith(".InstanceType")}
    assert ("m5.large", p.aws.subnets[0]) not in offered and len(offered) == 3
    assert len(live(aws_env)) == 2


def test_every_offering_exhausted_raises_capacity_and_leaks_nothing(aws_env):
    cooldown = OfferingCooldown(300)
    p = make(aws_env, cooldown=cooldown)
    for t in ("m5.large", "c5.large"):
        for z in zones(p):
            aws_env.faults.exhaust(t, z)
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-x", node_name="aws-1", pool="aws"))
    assert exc.value.kind is ErrorKind.CAPACITY
    assert live(aws_env) == []
    assert len(cooldown.excluded()) == 4
    # A second attempt makes no cloud call at all: everything is cooling down.
    before = len(aws_env.faults.fleet_requests)
    with pytest.raises(ProviderError) as again:
        p.launch(LaunchRequest(lease_id="lease-y", node_name="aws-2", pool="aws"))
    assert again.value.kind is ErrorKind.CAPACITY and len(aws_env.faults.fleet_requests) == before


def test_spot_exhausted_falls_back_to_on_demand_when_the_pool_allows(aws_env):
    p = make(aws_env, ondemand_fallback=True)
    for t in ("m5.large", "c5.large"):
        for z in zones(p):
            aws_env.faults.exhaust(t, z, market="spot")
    inst = p.launch(LaunchRequest(lease_id="lease-od", node_name="aws-1", pool="aws"))
    assert inst.offering.market == "on-demand"
    markets = [r["TargetCapacitySpecification.DefaultTargetCapacityType"] for r in aws_env.faults.fleet_requests]
    assert markets == ["spot", "on-demand"]
    tokens = [r["ClientToken"] for r in aws_env.faults.fleet_requests]
    assert tokens[0] != tokens[1]  # a different request never reuses the token (IdempotentParameterMismatch)
    assert [i["InstanceId"] for i in live(aws_env)] == [inst.instance_id]


def test_without_fallback_spot_exhaustion_never_buys_on_demand(aws_env):
    p = make(aws_env)
    for t in ("m5.large", "c5.large"):
        for z in zones(p):
            aws_env.faults.exhaust(t, z, market="spot")
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-nf", node_name="aws-1", pool="aws"))
    assert exc.value.kind is ErrorKind.CAPACITY and live(aws_env) == []


def test_partial_fulfilment_with_no_instance_is_a_capacity_error(aws_env):
    p = make(aws_env)
    aws_env.faults.partial(1)
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-p", node_name="aws-1", pool="aws"))
    assert exc.value.kind is ErrorKind.CAPACITY and live(aws_env) == []


def test_throttling_is_retried_with_backoff_then_succeeds(aws_env):
    sleeps: list[float] = []
    p = AwsProvider(pool_config(aws_env), "site1", FAST, OfferingCooldown(300), session=aws_env.session(),
                    sleep=sleeps.append)
    p.subnet_zones(), p.launch_template()
    aws_env.faults.throttle(2, "CreateFleet")
    inst = p.launch(LaunchRequest(lease_id="lease-t", node_name="aws-1", pool="aws"))
    assert len(sleeps) == 2 and all(0 <= s <= FAST.retry_max_s for s in sleeps)
    assert [i["InstanceId"] for i in live(aws_env)] == [inst.instance_id]


def test_throttling_past_the_attempts_raises_throttled(aws_env):
    p = make(aws_env)
    p.subnet_zones(), p.launch_template()
    aws_env.faults.throttle(10, "CreateFleet")
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-tt", node_name="aws-1", pool="aws"))
    assert exc.value.kind is ErrorKind.THROTTLED and aws_env.faults.calls.count("CreateFleet") == FAST.api_attempts


@pytest.mark.parametrize("code,status,kind", [
    ("UnauthorizedOperation", 403, ErrorKind.CONFIG),
    ("AuthFailure", 401, ErrorKind.CONFIG),
    ("InvalidLaunchTemplateName.NotFoundException", 400, ErrorKind.CONFIG),
    ("VcpuLimitExceeded", 400, ErrorKind.QUOTA),
])
def test_auth_config_and_quota_errors_fail_at_once_without_retry(aws_env, code, status, kind):
    p = make(aws_env)
    p.subnet_zones(), p.launch_template()
    aws_env.faults.fail(5, "CreateFleet", code, status)
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-auth", node_name="aws-1", pool="aws"))
    assert exc.value.kind is kind and exc.value.code == code
    assert aws_env.faults.calls.count("CreateFleet") == 1


def test_same_lease_twice_yields_one_instance(aws_env):
    p = make(aws_env)
    a = p.launch(LaunchRequest(lease_id="lease-dup", node_name="aws-1", pool="aws"))
    b = p.launch(LaunchRequest(lease_id="lease-dup", node_name="aws-1", pool="aws"))
    assert a.instance_id == b.instance_id and len(live(aws_env)) == 1


def test_crash_between_call_and_answer_then_retry_yields_one_instance(aws_env):
    p = make(aws_env, cloud=CloudConfig(api_attempts=1, retry_base_s=0.001, api_timeout_s=5))
    p.subnet_zones(), p.launch_template()
    aws_env.faults.drop_response(1, "CreateFleet")
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-crash", node_name="aws-1", pool="aws"))
    assert exc.value.kind is ErrorKind.TRANSIENT
    assert len(live(aws_env, "lease-crash")) == 1  # the VM exists; its answer was lost
    restarted = make(aws_env)  # a fresh daemon process
    inst = restarted.launch(LaunchRequest(lease_id="lease-crash", node_name="aws-1", pool="aws"))
    assert [i["InstanceId"] for i in live(aws_env)] == [inst.instance_id]


def test_slow_answer_past_the_timeout_is_retried_under_the_same_client_token(aws_env):
    p = make(aws_env, cloud=CloudConfig(api_attempts=3, retry_base_s=0.001, retry_max_s=0.01, api_timeout_s=0.5))
    p.subnet_zones(), p.launch_template()
    aws_env.faults.delay(1.5, 1, "CreateFleet")
    inst = p.launch(LaunchRequest(lease_id="lease-slow", node_name="aws-1", pool="aws"))
    assert [i["InstanceId"] for i in live(aws_env)] == [inst.instance_id]
    tokens = {r["ClientToken"] for r in aws_env.faults.fleet_requests}
    assert len(tokens) == 1


def test_list_terminate_and_preemption_seen_server_side(aws_env):
    p = make(aws_env)
    a = p.launch(LaunchRequest(lease_id="lease-1", node_name="aws-1", pool="aws"))
    b = p.launch(LaunchRequest(lease_id="lease-2", node_name="aws-2", pool="aws"))
    c = p.launch(LaunchRequest(lease_id="lease-3", node_name="aws-3", pool="aws"))
    # An instance of another cluster is never listed.
    other = make(aws_env)
    other.cluster_id = "other-site"
    other._template = None
    other.launch(LaunchRequest(lease_id="lease-9", node_name="aws-9", pool="aws"))
    aws_env.faults.reclaim(b.instance_id)
    by_id = {i.instance_id: i for i in p.list_instances()}
    assert set(by_id) == {a.instance_id, b.instance_id, c.instance_id}
    assert by_id[b.instance_id].preempted and by_id[b.instance_id].state == "preempted"
    assert not by_id[a.instance_id].preempted and by_id[a.instance_id].state == "running"
    p.terminate([a.instance_id, c.instance_id, "i-0123456789abcdef0", a.instance_id])  # gone id: no error
    states = {i.instance_id: i.state for i in p.list_instances()}
    assert states[a.instance_id] == "terminated" and states[c.instance_id] == "terminated"
    assert not by_id[a.instance_id].is_gone and by_id[b.instance_id].is_gone


def test_terminate_goes_in_batches(aws_env):
    p = make(aws_env, cloud=CloudConfig(api_attempts=2, retry_base_s=0.001, terminate_batch=2))
    ids = [p.launch(LaunchRequest(lease_id=f"lease-{i}", node_name=f"aws-{i}", pool="aws")).instance_id
           for i in range(1, 6)]
    aws_env.faults.calls.clear()
    p.terminate(ids)
    assert aws_env.faults.calls.count("TerminateInstances") == 3 and live(aws_env) == []


def test_spot_prices_from_price_history(aws_env):
    p = make(aws_env)
    prices = p.prices()
    z = zones(p)[0]
    assert prices[Offering("m5.large", z, "spot")] > 0
    assert prices[Offering("c5.large", z, "on-demand")] == 200_000


def test_no_key_or_credential_in_logs_user_data_tags_or_requests(aws_env, caplog):
    # burstd's own logs at DEBUG; libraries at INFO (botocore's DEBUG prints signed headers, never enable it)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="burstd")
    p = make(aws_env)
    aws_env.faults.exhaust("m5.large", zones(p)[0])
    aws_env.faults.throttle(1, "CreateFleet")
    inst = p.launch(LaunchRequest(lease_id="lease-s", node_name="aws-1", pool="aws"))
    ec2 = aws_env.client(direct=True)
    ud = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")["UserData"]["Value"]
    import base64
    corpus = "\n".join([
        caplog.text, base64.b64decode(ud).decode(), p.user_data(),
        json.dumps(live(aws_env), default=str), json.dumps(aws_env.faults.fleet_requests),
        (GOLDEN / "aws_create_fleet.json").read_text(),
    ])
    for secret in (MUNGE_KEY, FAKE_ACCESS_KEY, FAKE_SECRET_KEY, "BEGIN RSA", "aws_secret_access_key"):
        assert secret not in corpus


# -- gangs: a multi-node job's nodes, all or nothing ----------------------------------------------------------
def gang_requests(n: int, prefix: str = "lease-g") -> list[LaunchRequest]:
    return [LaunchRequest(lease_id=f"{prefix}{i}", node_name=f"aws-{i}", pool="aws") for i in range(1, n + 1)]


def test_gang_is_one_fleet_with_a_floor_of_every_node_in_one_az_each_tagged_with_its_node(aws_env):
    p = make(aws_env)
    reqs = gang_requests(3)
    insts = p.launch_gang("lease-g1", reqs)
    assert [(i.node_name, i.lease_id) for i in insts] == [(r.node_name, r.lease_id) for r in reqs]
    [fleet] = aws_env.faults.fleet_requests
    assert fleet["TargetCapacitySpecification.TotalTargetCapacity"] == "3"
    assert fleet["SpotOptions.MinTargetCapacity"] == "3" and fleet["SpotOptions.SingleAvailabilityZone"] == "true"
    raw = {i["InstanceId"]: i for i in live(aws_env)}
    assert set(raw) == {i.instance_id for i in insts}
    assert len({i["Placement"]["AvailabilityZone"] for i in raw.values()}) == 1
    for inst in insts:
        tags = {t["Key"]: t["Value"] for t in raw[inst.instance_id]["Tags"]}
        assert (tags["burstd:node"], tags["burstd:lease"], tags["burstd:gang"]) == (
            inst.node_name, inst.lease_id, "lease-g1")
        assert tags["burstd:cluster"] == "site1" and tags["Name"] == inst.node_name
    # the listing the daemon reads sees each node under its own lease
    listed = {i.lease_id: i.node_name for i in p.list_instances()}
    assert listed == {r.lease_id: r.node_name for r in reqs}


def test_gang_fleet_body_matches_golden(aws_env):
    p = make(aws_env, allocation_strategy="lowest-price")
    sent: list[dict] = []
    p.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", lambda params, **_: sent.append(params))
    p.launch_gang("lease-gold1", gang_requests(2, "lease-gold"))
    subnets = list(p.aws.subnets)
    body = json.loads(json.dumps(sent[0]).replace(subnets[0], "SUBNET_A").replace(subnets[1], "SUBNET_B")
                      .replace(p.launch_template()["LaunchTemplateName"], "burstd-site1-aws-<digest of its data>"))
    assert body["ClientToken"].startswith("lease-gold1-")
    body["ClientToken"] = "lease-gold1-<digest>"
    path = GOLDEN / "aws_create_fleet_gang.json"
    if os.environ.get("BURSTD_UPDATE_GOLDEN"):
        path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    assert body == json.loads(path.read_text())


def test_gang_repeat_after_a_lost_answer_returns_the_same_instances_and_tags_them(aws_env):
    p = make(aws_env)
    p.subnet_zones(), p.launch_template()
    # the fleet is made, every answer lost (the retries under the same token too): nothing tagged yet
    aws_env.faults.drop_response(FAST.api_attempts, "CreateFleet")
    reqs = gang_requests(2)
    with pytest.raises(ProviderError):
        p.launch_gang("lease-g1", reqs)
    made = live(aws_env)
    assert len(made) == 2 and all("burstd:lease" not in {t["Key"] for t in i["Tags"]} for i in made)
    insts = p.launch_gang("lease-g1", reqs)  # the daemon's retry: same gang
    assert sorted(i.instance_id for i in insts) == sorted(i["InstanceId"] for i in made)
    assert {i.lease_id for i in insts} == {"lease-g1", "lease-g2"}
    again = p.launch_gang("lease-g1", reqs)
    assert [(i.instance_id, i.lease_id) for i in again] == [(i.instance_id, i.lease_id) for i in insts]
    assert len(live(aws_env)) == 2


def test_gang_half_tagged_by_a_crash_is_finished_by_the_retry_and_its_untagged_vm_shows_its_gang(aws_env):
    """What ``aws.gang_tags.half_done`` leaves (the daemon crash test makes it for real): one VM tagged with its
    node and lease, the other with the gang only. The retry tags the other and makes nothing new; until then the
    listing names the untagged VM's gang (orphan collection spares it while the gang launches)."""
    p = make(aws_env)
    p.subnet_zones(), p.launch_template()
    aws_env.faults.drop_response(FAST.api_attempts, "CreateFleet")
    reqs = gang_requests(2)
    with pytest.raises(ProviderError):
        p.launch_gang("lease-g1", reqs)
    first, second = sorted(i["InstanceId"] for i in live(aws_env))
    aws_env.client(direct=True).create_tags(Resources=[first], Tags=[
        {"Key": "burstd:lease", "Value": "lease-g1"}, {"Key": "burstd:node", "Value": "aws-1"}])
    untagged = {i.instance_id: i for i in p.list_instances()}[second]
    assert untagged.lease_id == "" and untagged.extra["gang"] == "lease-g1"
    insts = p.launch_gang("lease-g1", reqs)
    assert [(i.instance_id, i.lease_id, i.node_name) for i in insts] == [
        (first, "lease-g1", "aws-1"), (second, "lease-g2", "aws-2")]
    assert len(aws_env.faults.fleet_requests) == 1 and len(live(aws_env)) == 2
    assert {i.instance_id: i.lease_id for i in p.list_instances()} == {first: "lease-g1", second: "lease-g2"}


@pytest.mark.parametrize("honour_min, says", [
    (True, "UnfulfillableCapacity"),  # capacity for one of two: EC2 honours the floor and makes none
    (False, "1 of 2 nodes"),  # an API handing out less than the floor anyway: burstd releases it
])
def test_gang_without_capacity_for_every_node_leaves_nothing(aws_env, honour_min, says):
    p = make(aws_env)
    aws_env.faults.partial(1, keep=1, honour_min=honour_min)
    with pytest.raises(ProviderError) as exc:
        p.launch_gang("lease-g1", gang_requests(2))
    assert exc.value.kind is ErrorKind.CAPACITY and says in str(exc.value)
    assert live(aws_env) == []


def test_gang_lands_in_the_next_az_when_the_first_is_exhausted(aws_env):
    p = make(aws_env)
    first, second = zones(p)
    aws_env.faults.exhaust("m5.large", first)
    aws_env.faults.exhaust("c5.large", first)
    insts = p.launch_gang("lease-g1", gang_requests(2))
    assert {i.offering.zone for i in insts} == {second}
    assert p.cooldown.is_cooling(Offering("m5.large", first, "spot"))
