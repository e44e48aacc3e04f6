"""The GCP provider: the real google-cloud-compute client over HTTP against the fake Compute Engine endpoint.

The fake parses every request body into compute_v1 types with unknown fields rejected (a malformed request
fails the test in the fixture's teardown) and requires requestId to be a UUID.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

import pytest

from burstd.config import CloudConfig, PoolConfig
from burstd.providers.base import ErrorKind, LaunchRequest, Offering, ProviderError, launch_all_or_nothing
from burstd.providers.gcp import GcpProvider, instance_name, request_id
from burstd.providers.offerings import OfferingCooldown
from tests.fakes.gce import gce_env, gce_server  # noqa: F401

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
MUNGE_KEY = "c2VjcmV0LW11bmdlLWtleS1uZXZlci1zaG93LW1l"
FAST = CloudConfig(api_attempts=4, retry_base_s=0.001, retry_max_s=0.01, api_timeout_s=5, capacity_cooldown_s=300)
ZONES = ["us-central1-a", "us-central1-b"]


def pool_config(env, zones=ZONES, ondemand_fallback: bool = False, **gcp) -> PoolConfig:
    return PoolConfig.model_validate({
        "name": "gcp", "provider": "gcp", "partition": "cloud-gcp", "node_prefix": "gcp-", "node_count": 8,
        "price_per_hour": 0.03, "ondemand_price_per_hour": 0.1, "ondemand_fallback": ondemand_fallback,
        "instance_types": [{"name": "n2-standard-2", "cpus": 2, "memory_mb": 7000},
                           {"name": "e2-standard-2", "cpus": 2, "memory_mb": 7000}],
        "gcp": {"project": env.project, "region": "us-central1", "zones": zones, "api_endpoint": env.url,
                "anonymous_credentials": True, "conf_server": "10.0.0.1:6817"} | gcp,
    })


def make(env, cloud=FAST, cooldown=None, **kw) -> GcpProvider:
    return GcpProvider(pool_config(env, **kw), "site1", cloud, cooldown or OfferingCooldown(300), sleep=lambda s: None)


def live(env, lease: str | None = None) -> list[dict]:
    return [i for i in env.fake.live(env.project) if lease is None or i["labels"].get("burstd-lease") == lease]


def exhaust_all(env, market: str | None = None) -> None:
    for t in ("n2-standard-2", "e2-standard-2"):
        for z in ZONES:
            env.fake.exhaust(t, z, market=market)


def test_zonal_launch_creates_one_labelled_spot_vm_with_the_bootstrap(gce_env):
    p = make(gce_env, zones=["us-central1-a"])
    inst = p.launch(LaunchRequest(lease_id="lease-0001", node_name="gcp-1", pool="gcp"))
    [vm] = live(gce_env)
    assert inst.instance_id == f"us-central1-a/{vm['name']}" and vm["name"].startswith("gcp-1-")
    assert vm["labels"] == {"burstd-cluster": "site1", "burstd-pool": "gcp", "burstd-node": "gcp-1",
                            "burstd-lease": "lease-0001"}
    assert vm["scheduling"]["provisioningModel"] == "SPOT"
    assert vm["scheduling"]["instanceTerminationAction"] == "DELETE"
    meta = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
    assert meta["burstd-node"] == "gcp-1" and "--conf-server" in meta["startup-script"]
    assert inst.lease_id == "lease-0001" and inst.node_name == "gcp-1" and inst.state == "running"
    assert inst.offering == Offering("n2-standard-2", "us-central1-a", "spot")
    # The operation was waited on through the zone operations client (the fake answers RUNNING first).
    assert "operation" in gce_env.fake.calls
    kinds = [k for k, _, _ in gce_env.fake.requests]
    assert kinds == ["bulkInsert"]


def test_bulk_insert_body_matches_golden(gce_env):
    p = make(gce_env)
    p.launch(LaunchRequest(lease_id="lease-golden", node_name="gcp-3", pool="gcp"))
    [(kind, where, body)] = gce_env.fake.requests
    assert kind == "bulkInsert" and where == f"{gce_env.project}/us-central1"  # regional: two zones
    assert_golden(gce_env, p, body, "gce_bulk_insert.json")


def assert_golden(env, p: GcpProvider, body: dict, name: str) -> None:
    """``body`` as sent, but for the endpoint and the rendered start-up script, equals tests/golden/``name``
    (BURSTD_UPDATE_GOLDEN=1 rewrites it)."""
    body = json.loads(json.dumps(body).replace(env.url, "ENDPOINT"))
    script = next(i for i in body["instanceProperties"]["metadata"]["items"] if i["key"] == "startup-script")
    assert script["value"] == p.startup_script()
    script["value"] = "<rendered scripts/node-bootstrap.sh>"
    path = GOLDEN / name
    if os.environ.get("BURSTD_UPDATE_GOLDEN"):
        path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    assert body == json.loads(path.read_text())


def test_request_id_is_a_stable_uuid_per_lease():
    a = request_id("site1", "lease-1", "spot/n2")
    assert uuid.UUID(a) and a == request_id("site1", "lease-1", "spot/n2")
    assert a != request_id("site1", "lease-2", "spot/n2") != request_id("site2", "lease-1", "spot/n2")


def test_capacity_error_in_every_zone_of_the_first_type_lands_on_the_next_type(gce_env):
    cooldown = OfferingCooldown(300)
    p = make(gce_env, cooldown=cooldown)
    for z in ZONES:
        gce_env.fake.exhaust("n2-standard-2", z, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    inst = p.launch(LaunchRequest(lease_id="lease-a", node_name="gcp-1", pool="gcp"))
    assert inst.offering.instance_type == "e2-standard-2"
    assert cooldown.is_cooling(Offering("n2-standard-2", "us-central1-a", "spot"))
    # The next launch skips the cooled-down type without asking.
    p.launch(LaunchRequest(lease_id="lease-b", node_name="gcp-2", pool="gcp"))
    types = [b["instanceProperties"]["machineType"] for _, _, b in gce_env.fake.requests]
    assert types == ["n2-standard-2", "e2-standard-2", "e2-standard-2"]
    assert len(live(gce_env)) == 2


def test_zonal_capacity_error_moves_to_the_other_zone_through_the_location_policy(gce_env):
    cooldown = OfferingCooldown(300)
    cooldown.mark(Offering("n2-standard-2", "us-central1-a", "spot"), "earlier")
    p = make(gce_env, cooldown=cooldown)
    inst = p.launch(LaunchRequest(lease_id="lease-z", node_name="gcp-1", pool="gcp"))
    assert inst.offering == Offering("n2-standard-2", "us-central1-b", "spot")
    locs = gce_env.fake.requests[0][2]["locationPolicy"]["locations"]
    assert locs == {"zones/us-central1-a": {"preference": "DENY"}, "zones/us-central1-b": {"preference": "ALLOW"}}


def test_every_offering_exhausted_raises_capacity_and_leaks_nothing(gce_env):
    p = make(gce_env)
    exhaust_all(gce_env)
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-x", node_name="gcp-1", pool="gcp"))
    assert exc.value.kind is ErrorKind.CAPACITY and live(gce_env) == []
    assert len(p.cooldown.excluded()) == 4


def test_spot_exhausted_falls_back_to_standard_vms_when_the_pool_allows(gce_env):
    p = make(gce_env, ondemand_fallback=True)
    exhaust_all(gce_env, market="spot")
    inst = p.launch(LaunchRequest(lease_id="lease-od", node_name="gcp-1", pool="gcp"))
    assert inst.offering.market == "on-demand" and [i["name"] for i in live(gce_env)] == [inst.instance_id.split("/")[1]]
    models = [b["instanceProperties"]["scheduling"]["provisioningModel"]
              for kind, _, b in gce_env.fake.requests if kind == "bulkInsert"]
    assert models == ["SPOT", "SPOT", "STANDARD"]  # both machine types tried as spot first
    # a gang falls back the same way, whole
    insts = p.launch_gang("lease-g1", gang_requests(2))
    assert {i.offering.market for i in insts} == {"on-demand"} and len(live(gce_env)) == 3


def test_without_fallback_spot_exhaustion_never_buys_standard_vms(gce_env):
    p = make(gce_env)
    exhaust_all(gce_env, market="spot")
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-x", node_name="gcp-1", pool="gcp"))
    assert exc.value.kind is ErrorKind.CAPACITY and live(gce_env) == []
    assert all(b["instanceProperties"]["scheduling"]["provisioningModel"] == "SPOT"
               for kind, _, b in gce_env.fake.requests if kind == "bulkInsert")


def test_quota_exceeded_stops_without_trying_other_types(gce_env):
    p = make(gce_env)
    gce_env.fake.quota(1)
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-q", node_name="gcp-1", pool="gcp"))
    assert exc.value.kind is ErrorKind.QUOTA and exc.value.code == "QUOTA_EXCEEDED"
    assert len(gce_env.fake.requests) == 1 and live(gce_env) == []


def test_rate_limits_are_retried_with_backoff(gce_env):
    sleeps: list[float] = []
    p = GcpProvider(pool_config(gce_env), "site1", FAST, OfferingCooldown(300), sleep=sleeps.append)
    gce_env.fake.rate_limit(2, "bulkInsert")
    inst = p.launch(LaunchRequest(lease_id="lease-t", node_name="gcp-1", pool="gcp"))
    assert len(sleeps) >= 2 and [v["name"] for v in live(gce_env)] == [inst.instance_id.split("/")[1]]


@pytest.mark.parametrize("status,reason,kind", [
    (401, "authError", ErrorKind.CONFIG),
    (403, "forbidden", ErrorKind.CONFIG),
    (403, "quotaExceeded", ErrorKind.QUOTA),
    (429, "rateLimitExceeded", ErrorKind.THROTTLED),
])
def test_http_errors_are_classified_and_auth_is_never_retried(gce_env, status, reason, kind):
    p = make(gce_env)
    gce_env.fake.fail(10, "bulkInsert", status, reason)
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-e", node_name="gcp-1", pool="gcp"))
    assert exc.value.kind is kind
    expected = FAST.api_attempts if kind is ErrorKind.THROTTLED else 1
    assert gce_env.fake.calls.count("bulkInsert") == expected


def test_same_lease_twice_yields_one_instance(gce_env):
    p = make(gce_env)
    a = p.launch(LaunchRequest(lease_id="lease-dup", node_name="gcp-1", pool="gcp"))
    b = p.launch(LaunchRequest(lease_id="lease-dup", node_name="gcp-1", pool="gcp"))
    assert a.instance_id == b.instance_id and len(live(gce_env)) == 1


def test_crash_between_call_and_answer_then_retry_yields_one_instance(gce_env):
    p = make(gce_env, cloud=CloudConfig(api_attempts=1, api_timeout_s=5))
    gce_env.fake.drop_response(1, "bulkInsert")
    with pytest.raises(ProviderError) as exc:
        p.launch(LaunchRequest(lease_id="lease-crash", node_name="gcp-1", pool="gcp"))
    assert exc.value.kind is ErrorKind.TRANSIENT and len(live(gce_env)) == 1
    inst = make(gce_env).launch(LaunchRequest(lease_id="lease-crash", node_name="gcp-1", pool="gcp"))
    assert [v["name"] for v in live(gce_env)] == [inst.instance_id.split("/")[1]]


def test_retry_after_a_lost_answer_reuses_the_request_id(gce_env):
    p = make(gce_env)
    gce_env.fake.drop_response(1, "bulkInsert")
    inst = p.launch(LaunchRequest(lease_id="lease-rid", node_name="gcp-1", pool="gcp"))
    assert len(gce_env.fake.requests) == 2 and len(gce_env.fake.request_ids) == 1
    assert [v["name"] for v in live(gce_env)] == [inst.instance_id.split("/")[1]]


def test_list_terminate_and_preemption_seen_server_side(gce_env):
    p = make(gce_env)
    a = p.launch(LaunchRequest(lease_id="lease-1", node_name="gcp-1", pool="gcp"))
    b = p.launch(LaunchRequest(lease_id="lease-2", node_name="gcp-2", pool="gcp"))
    stop = make(gce_env, termination_action="STOP")
    c = stop.launch(LaunchRequest(lease_id="lease-3", node_name="gcp-3", pool="gcp"))
    other = GcpProvider(pool_config(gce_env), "other-site", FAST, sleep=lambda s: None)
    other.launch(LaunchRequest(lease_id="lease-9", node_name="gcp-9", pool="gcp"))
    zb, nb = b.instance_id.split("/")
    zc, nc = c.instance_id.split("/")
    gce_env.fake.preempt(gce_env.project, zb, nb)  # DELETE: vanishes
    gce_env.fake.preempt(gce_env.project, zc, nc)  # STOP: TERMINATED
    by_id = {i.instance_id: i for i in p.list_instances()}
    assert set(by_id) == {a.instance_id, b.instance_id, c.instance_id}
    assert by_id[b.instance_id].preempted and by_id[c.instance_id].preempted
    assert by_id[c.instance_id].lease_id == "lease-3" and not by_id[a.instance_id].preempted
    p.terminate([a.instance_id, c.instance_id, "us-central1-a/gone-vm", a.instance_id])
    assert {i.instance_id for i in p.list_instances() if not i.is_gone} == set()
    assert [v["labels"]["burstd-cluster"] for v in live(gce_env)] == ["other-site"]


def test_prices_come_from_the_config(gce_env):
    prices = make(gce_env).prices()
    assert prices[Offering("n2-standard-2", "us-central1-a", "spot")] == 30_000
    assert prices[Offering("e2-standard-2", "us-central1-b", "on-demand")] == 100_000


def test_no_key_or_credential_in_logs_metadata_labels_or_requests(gce_env, caplog):
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="burstd")
    p = make(gce_env)
    gce_env.fake.exhaust("n2-standard-2", "us-central1-a")
    gce_env.fake.rate_limit(1)
    p.launch(LaunchRequest(lease_id="lease-s", node_name="gcp-1", pool="gcp"))
    corpus = "\n".join([caplog.text, json.dumps(gce_env.fake.requests), json.dumps(live(gce_env)),
                        (GOLDEN / "gce_bulk_insert.json").read_text()])
    for secret in (MUNGE_KEY, "access_token\":", "BEGIN PRIVATE KEY", "ya29."):
        assert secret not in corpus


def test_the_fake_rejects_a_malformed_body_and_a_non_uuid_request_id(gce_env):
    import httpx

    url = f"{gce_env.url}/compute/v1/projects/{gce_env.project}/zones/us-central1-a/instances/bulkInsert"
    bad = httpx.post(url, params={"requestId": str(uuid.uuid4())}, json={"count": "1", "instanceProprties": {}})
    assert bad.status_code == 400 and "instanceProprties" in bad.text
    bad_id = httpx.post(url, params={"requestId": "lease-1"}, json={"count": "1"})
    assert bad_id.status_code == 400 and "UUID" in bad_id.text
    assert len(gce_env.fake.malformed) == 2
    gce_env.fake.malformed.clear()  # expected here; any other test with one fails in the fixture


# -- gangs: a multi-node job's nodes, all or nothing ----------------------------------------------------------
def gang_requests(n: int, prefix: str = "lease-g") -> list[LaunchRequest]:
    return [LaunchRequest(lease_id=f"{prefix}{k}", node_name=f"gcp-{k}", pool="gcp") for k in range(1, n + 1)]


def test_gang_is_one_bulk_insert_of_every_node_in_one_zone_each_listed_under_its_own_lease(gce_env):
    p = make(gce_env)
    reqs = gang_requests(3)
    insts = launch_all_or_nothing(p, "lease-g1", reqs)  # the daemon's entry point picks launch_gang
    assert [(i.node_name, i.lease_id) for i in insts] == [(r.node_name, r.lease_id) for r in reqs]
    [(kind, where, body)] = gce_env.fake.requests
    assert kind == "bulkInsert" and where == f"{gce_env.project}/us-central1"
    assert (body["count"], body["minCount"]) == ("3", "3")
    assert body["locationPolicy"]["targetShape"] == "ANY_SINGLE_ZONE"
    vms = {f"{v['zone'].rsplit('/', 1)[-1]}/{v['name']}": v for v in live(gce_env)}
    assert set(vms) == {i.instance_id for i in insts}
    assert len({i.offering.zone for i in insts}) == 1
    for inst, req in zip(insts, reqs):
        vm = vms[inst.instance_id]
        assert vm["name"] == instance_name(req.node_name, req.lease_id)
        assert vm["labels"] == {"burstd-cluster": "site1", "burstd-pool": "gcp", "burstd-gang": "lease-g1"}
        meta = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
        assert json.loads(meta["burstd-members"])[vm["name"]] == {"node": req.node_name, "lease": req.lease_id}
        assert meta["burstd-gang"] == "lease-g1" and "burstd-node" not in meta
    # the listing the daemon reads (orphan detection) sees each member under its own lease and node
    assert {i.lease_id: (i.node_name, i.instance_id) for i in p.list_instances()} == {
        i.lease_id: (i.node_name, i.instance_id) for i in insts}


def test_gang_bulk_insert_body_matches_golden(gce_env):
    p = make(gce_env)
    p.launch_gang("lease-gold1", gang_requests(2, "lease-gold"))
    [(_, _, body)] = gce_env.fake.requests
    assert_golden(gce_env, p, body, "gce_bulk_insert_gang.json")


def test_gang_repeat_returns_the_same_instances_without_a_second_bulk_insert(gce_env):
    p = make(gce_env)
    reqs = gang_requests(3)
    first = p.launch_gang("lease-g1", reqs)
    again = make(gce_env).launch_gang("lease-g1", list(reversed(reqs)))  # a restarted daemon, any order
    assert [i.instance_id for i in again] == [i.instance_id for i in reversed(first)]
    assert [i.lease_id for i in again] == [r.lease_id for r in reversed(reqs)]
    assert gce_env.fake.calls.count("bulkInsert") == 1 and len(live(gce_env)) == 3


def test_gang_repeat_after_every_answer_was_lost_returns_what_the_first_call_made(gce_env):
    p = make(gce_env)
    gce_env.fake.drop_response(FAST.api_attempts, "bulkInsert")  # made; the retries under its requestId lost too
    reqs = gang_requests(2)
    with pytest.raises(ProviderError) as exc:
        p.launch_gang("lease-g1", reqs)
    assert exc.value.kind is ErrorKind.TRANSIENT and len(live(gce_env)) == 2
    assert len(gce_env.fake.request_ids) == 1  # every retry carried the gang's requestId
    insts = p.launch_gang("lease-g1", reqs)
    assert sorted(i.instance_id.split("/")[1] for i in insts) == sorted(v["name"] for v in live(gce_env))
    assert [i.lease_id for i in insts] == ["lease-g1", "lease-g2"] and len(gce_env.fake.created) == 2


def test_gang_lands_whole_in_the_zone_with_room_for_all(gce_env):
    p = make(gce_env)
    gce_env.fake.limit("n2-standard-2", "us-central1-a", 2)  # a: room for 2 of 3; b: room for all
    insts = p.launch_gang("lease-g1", gang_requests(3))
    assert {i.offering for i in insts} == {Offering("n2-standard-2", "us-central1-b", "spot")}
    assert len(live(gce_env)) == 3


def test_gang_without_room_for_all_in_any_one_zone_launches_none(gce_env):
    # room for 2 + 2 = 4 VMs in the region, but no single zone holds the 3: GCE makes none (minCount 3)
    p = make(gce_env)
    for t in ("n2-standard-2", "e2-standard-2"):
        for z in ZONES:
            gce_env.fake.limit(t, z, 2)
    with pytest.raises(ProviderError) as exc:
        p.launch_gang("lease-g1", gang_requests(3))
    assert exc.value.kind is ErrorKind.CAPACITY and "ZONE_RESOURCE_POOL_EXHAUSTED" in str(exc.value)
    assert live(gce_env) == [] and gce_env.fake.created == []
    assert [b["instanceProperties"]["machineType"] for _, _, b in gce_env.fake.requests] == [
        "n2-standard-2", "e2-standard-2"]
    assert len(p.cooldown.excluded()) == 4
    # a single node still fits: the limit is capacity, not a broken zone (the cooldown is what skips it)
    fresh = make(gce_env)
    assert fresh.launch(LaunchRequest(lease_id="lease-1", node_name="gcp-9", pool="gcp")).state == "running"


def test_the_fake_makes_what_fits_when_count_exceeds_room_but_min_count_does_not(gce_env):
    from google.cloud import compute_v1

    gce_env.fake.limit("n2-standard-2", "us-central1-a", 2)
    p = make(gce_env, zones=["us-central1-a"])
    resource = build_gang(p, gang_requests(3))
    resource.min_count = 2
    op = p.instances.bulk_insert_unary(request=compute_v1.BulkInsertInstanceRequest(
        project=gce_env.project, zone="us-central1-a", bulk_insert_instance_resource_resource=resource,
        request_id=str(uuid.uuid4())))
    assert not p.wait(op, "us-central1-a", None).error.errors
    assert len(live(gce_env)) == 2
    resource = build_gang(p, gang_requests(3, "lease-h"))
    resource.min_count = 1  # the zone is full now
    op = p.instances.bulk_insert_unary(request=compute_v1.BulkInsertInstanceRequest(
        project=gce_env.project, zone="us-central1-a", bulk_insert_instance_resource_resource=resource,
        request_id=str(uuid.uuid4())))
    [err] = p.wait(op, "us-central1-a", None).error.errors
    assert err.code == "ZONE_RESOURCE_POOL_EXHAUSTED" and len(live(gce_env)) == 2


def build_gang(p: GcpProvider, reqs: list[LaunchRequest]):
    from burstd.providers.gcp import build_gang_bulk_insert

    return build_gang_bulk_insert(cluster_id="site1", pool=p.pool, gang="lease-g1", requests=reqs,
                                  machine_type="n2-standard-2", market="spot", zones=None, startup_script="x")


def test_gang_in_a_one_zone_pool_is_zonal_and_fails_whole_when_the_zone_is_short(gce_env):
    p = make(gce_env, zones=["us-central1-a"])
    gce_env.fake.limit("n2-standard-2", "us-central1-a", 1)
    gce_env.fake.exhaust("e2-standard-2", "us-central1-a")
    with pytest.raises(ProviderError) as exc:
        p.launch_gang("lease-g1", gang_requests(2))
    assert exc.value.kind is ErrorKind.CAPACITY and live(gce_env) == []
    assert {w for _, w, _ in gce_env.fake.requests} == {f"{gce_env.project}/us-central1-a"}
    assert all("locationPolicy" not in b for _, _, b in gce_env.fake.requests)


def test_gang_with_every_offering_exhausted_raises_capacity_and_leaves_nothing(gce_env):
    p = make(gce_env)
    exhaust_all(gce_env)
    with pytest.raises(ProviderError) as exc:
        p.launch_gang("lease-g1", gang_requests(3))
    assert exc.value.kind is ErrorKind.CAPACITY and exc.value.code == "NoCapacity"
    assert "all or nothing" in str(exc.value) and live(gce_env) == []
    with pytest.raises(ProviderError):  # every offering cooling down: no call at all
        p.launch_gang("lease-g1", gang_requests(3))
    assert gce_env.fake.calls.count("bulkInsert") == 2


def test_half_a_gang_found_is_deleted_and_the_gang_made_whole_anew(gce_env):
    p = make(gce_env)
    reqs = gang_requests(3)
    first = p.launch_gang("lease-g1", reqs)
    p.terminate([first[0].instance_id])  # say one member was lost before the daemon recorded the gang
    insts = p.launch_gang("lease-g1", reqs)
    assert [i.lease_id for i in insts] == [r.lease_id for r in reqs] and len(live(gce_env)) == 3
    assert gce_env.fake.calls.count("bulkInsert") == 2 and len(gce_env.fake.created) == 6  # a new requestId
    assert len({i.offering.zone for i in insts}) == 1


def test_gang_asked_again_for_fewer_members_keeps_theirs_and_leaves_the_other_to_orphan_collection(gce_env):
    p = make(gce_env)
    first = p.launch_gang("lease-g1", gang_requests(3))
    # a member failed before the daemon recorded the launch; the retry asks for the two others
    again = p.launch_gang("lease-g1", gang_requests(3)[1:])
    assert [i.instance_id for i in again] == [i.instance_id for i in first[1:]]
    assert gce_env.fake.calls.count("bulkInsert") == 1 and len(live(gce_env)) == 3
    # the same gang id for leases it never had: a new gang, under its own requestId; the old one untouched
    other = p.launch_gang("lease-g1", gang_requests(2, "lease-other"))
    assert [i.lease_id for i in other] == ["lease-other1", "lease-other2"]
    assert gce_env.fake.calls.count("bulkInsert") == 2 and len(live(gce_env)) == 5


def test_a_gang_retried_for_its_one_remaining_member_finds_that_members_vm(gce_env):
    from burstd.providers.base import launch_all_or_nothing

    p = make(gce_env)
    made = launch_all_or_nothing(p, "lease-g1", gang_requests(2))
    # the other member failed meanwhile; the daemon retries the gang for the one left: no second VM for it
    again = launch_all_or_nothing(p, "lease-g1", gang_requests(2)[1:])
    assert [i.instance_id for i in again] == [made[1].instance_id] and len(live(gce_env)) == 2
