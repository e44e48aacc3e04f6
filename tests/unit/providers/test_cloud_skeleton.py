"""The launch skeleton every cloud shares (``burstd.providers.cloud.CloudProvider``), on a toy cloud that answers
from a table: the algorithm alone, as the AWS and GCP integration tests check it against moto and the fake GCE.

The toy cloud is also the shape of a new cloud: its hooks are all a cloud supplies (docs/clouds.md)."""

from __future__ import annotations

import itertools

import pytest

from burstd.config import PoolConfig
from burstd.providers.base import ErrorKind, Instance, LaunchRequest, Offering, ProviderError
from burstd.providers.cloud import Ask, Attempt, CloudProvider
from burstd.providers.offerings import OfferingCooldown
from burstd.config import CloudConfig


class ToyCloud(CloudProvider):
    """Zones z1, z2; ``no_room`` offerings answer capacity errors; ``short`` makes a gang one instance short."""

    cloud_name = "toy"

    def __init__(self, fallback: bool = False):
        super().__init__(PoolConfig.model_validate({
            "name": "toy", "provider": "local", "partition": "c", "node_prefix": "t", "node_count": 8,
            "price_per_hour": 0.1, "ondemand_fallback": fallback,
            "instance_types": [{"name": "small", "cpus": 1, "memory_mb": 1}, {"name": "big", "cpus": 1, "memory_mb": 1}]}),
            "site1", CloudConfig(), OfferingCooldown(600), sleep=lambda s: None)
        self.no_room: set[Offering] = set()
        self.hard: ProviderError | None = None
        self.extra = 0
        self.short = False
        self.calls: list[Ask] = []
        self.live: dict[str, Instance] = {}
        self.ids = itertools.count(1)

    def classify(self, exc):
        return ProviderError(ErrorKind.TRANSIENT, str(exc), code="Toy")

    def offerings(self, market):
        return [Offering(t, z, market) for t in ("small", "big") for z in ("z1", "z2")]

    def groups(self, choices):  # one call per instance type, like GCE
        return [[o for o in choices if o.instance_type == t] for t in ("small", "big")
                if any(o.instance_type == t for o in choices)]

    def find_by_lease(self, lease_id):
        return next((i for i in self.live.values() if i.lease_id == lease_id), None)

    def find_gang(self, gang, requests):
        leases = {r.lease_id for r in requests}
        return [i for i in self.live.values() if i.extra.get("gang") == gang and i.lease_id in leases]

    def create(self, ask):
        self.calls.append(ask)
        if self.hard is not None:
            return Attempt(error=self.hard, failures=["hard"])
        room = [o for o in ask.offerings if o not in self.no_room]
        if not room:
            return Attempt(exhausted={o: "NoRoom" for o in ask.offerings},
                           failures=[f"{ask.market} {ask.offerings[0].instance_type}: NoRoom"])
        n = len(ask.requests) + self.extra - (1 if self.short else 0)
        made = []
        for k in range(n):
            r = ask.requests[min(k, len(ask.requests) - 1)]
            inst = Instance(f"i-{next(self.ids)}", r.lease_id if k < len(ask.requests) else "", r.node_name, "toy",
                            "running", 0.0, offering=room[0], extra={"gang": ask.gang or ""})
            self.live[inst.instance_id] = inst
            made.append(inst)
        return Attempt(made=made)

    def terminate(self, instance_ids):
        for i in instance_ids:
            self.live.pop(i, None)


def req(i=1, market="spot", exclude=frozenset()):
    return LaunchRequest(f"L{i}", f"t{i}", "toy", market, exclude)


def test_a_lease_already_launched_is_returned_without_a_call():
    cloud = ToyCloud()
    first = cloud.launch(req())
    assert cloud.launch(req()) == first and len(cloud.calls) == 1


def test_capacity_errors_cool_offerings_down_and_the_next_group_is_tried_then_skipped_while_cooling():
    cloud = ToyCloud()
    cloud.no_room = {Offering("small", "z1", "spot"), Offering("small", "z2", "spot")}
    inst = cloud.launch(req(1))
    assert inst.offering == Offering("big", "z1", "spot")
    assert [a.offerings[0].instance_type for a in cloud.calls] == ["small", "big"]
    assert cloud.cooldown.is_cooling(Offering("small", "z2", "spot"))
    cloud.calls.clear()
    cloud.launch(req(2, exclude=frozenset({Offering("big", "z1", "spot")})))
    assert [a.offerings for a in cloud.calls] == [(Offering("big", "z2", "spot"),)]  # cooled and excluded skipped


def test_spot_exhausted_falls_back_to_on_demand_only_when_the_pool_says_so():
    spot = {Offering(t, z, "spot") for t in ("small", "big") for z in ("z1", "z2")}
    cloud = ToyCloud(fallback=False)
    cloud.no_room = spot
    with pytest.raises(ProviderError) as exc:
        cloud.launch(req())
    assert exc.value.kind is ErrorKind.CAPACITY and exc.value.code == "NoCapacity"
    assert "toy pool toy: no capacity for lease L1: spot small: NoRoom; spot big: NoRoom" in str(exc.value)
    assert cloud.live == {}
    cloud = ToyCloud(fallback=True)
    cloud.no_room = spot
    assert cloud.launch(req()).offering.market == "on-demand"
    # an on-demand request never falls back anywhere
    cloud = ToyCloud(fallback=True)
    cloud.no_room = {Offering(t, z, "on-demand") for t in ("small", "big") for z in ("z1", "z2")}
    with pytest.raises(ProviderError, match="no capacity"):
        cloud.launch(req(market="on-demand"))
    assert {a.market for a in cloud.calls} == {"on-demand"}


def test_every_offering_cooling_is_no_capacity_without_a_call():
    cloud = ToyCloud()
    for o in cloud.offerings("spot"):
        cloud.cooldown.mark(o, "earlier")
    with pytest.raises(ProviderError, match="spot: every offering is cooling down or excluded"):
        cloud.launch(req())
    assert cloud.calls == []


def test_a_non_capacity_error_is_raised_and_no_other_offering_is_tried():
    cloud = ToyCloud()
    cloud.hard = ProviderError(ErrorKind.QUOTA, "quota", code="QuotaExceeded")
    with pytest.raises(ProviderError) as exc:
        cloud.launch(req())
    assert exc.value.kind is ErrorKind.QUOTA and len(cloud.calls) == 1


def test_more_instances_than_asked_are_terminated_one_vm_per_lease():
    cloud = ToyCloud()
    cloud.extra = 2
    inst = cloud.launch(req())
    assert list(cloud.live) == [inst.instance_id]


def test_a_gang_is_all_or_nothing_and_idempotent_on_the_gang():
    cloud = ToyCloud()
    gang = [req(1), req(2), req(3)]
    cloud.short = True  # the answer is one short: released, and the next group is tried (short again)
    with pytest.raises(ProviderError, match=r"gang G \(3 nodes, all or nothing\).*2 of 3 nodes \(released"):
        cloud.launch_gang("G", gang)
    assert cloud.live == {}
    cloud.short = False
    made = cloud.launch_gang("G", gang)
    assert [i.lease_id for i in made] == ["L1", "L2", "L3"]
    calls = len(cloud.calls)
    assert cloud.launch_gang("G", gang) == made and len(cloud.calls) == calls  # found, not made again
    # half a gang left from an earlier answer is deleted first, and the call is told what went
    del cloud.live[made[2].instance_id]
    again = cloud.launch_gang("G", gang)
    assert cloud.calls[-1].released == tuple(sorted(i.instance_id for i in made[:2]))
    assert {i.instance_id for i in again} == set(cloud.live) and len(cloud.live) == 3


def test_the_base_builds_a_cloud_from_its_pool_and_retries_each_call_as_the_cloud_settings_say(caplog):
    toy = ToyCloud()
    assert (toy.name, toy.cluster_id, toy.retry.attempts) == ("toy", "site1", toy.cloud.api_attempts)
    calls: list[int] = []

    def flaky():
        calls.append(1)
        if len(calls) < toy.cloud.api_attempts:
            raise RuntimeError("blip")
        return "ok"

    with caplog.at_level("WARNING", logger="burstd.providers"):
        assert toy._call("Describe", flaky) == "ok"
    assert len(calls) == toy.cloud.api_attempts
    assert "toy pool toy: Describe: transient: Toy: blip" in caplog.text  # classified by the cloud's hook, named by the base


def test_a_cloud_missing_a_hook_is_refused_when_built():
    class HalfCloud(CloudProvider):
        def classify(self, exc):
            return ProviderError(ErrorKind.TRANSIENT, str(exc))

    with pytest.raises(TypeError, match="abstract.*create"):
        HalfCloud(ToyCloud().pool, "site1")
