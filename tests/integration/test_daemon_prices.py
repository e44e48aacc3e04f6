"""The daemon prices AWS pools from spot price history, through the pool's own provider (``Provider.prices()``,
real boto3 against moto), cached in ``burstd.daemon.prices``."""

from __future__ import annotations

from burstd.config import Config
from burstd.daemon.prices import PRICE_TTL_S
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.money import usd_to_micros
from tests.fakes.moto_server import aws_env, moto_server  # noqa: F401
from tests.integration.test_aws_provider import FAST, make
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeStore


def newest_spot_price(ec2, pool, zones) -> int:
    """What moto's history says, read directly: the highest of the newest price per (type, AZ of the pool)."""
    rows = ec2.describe_spot_price_history(InstanceTypes=[t.name for t in pool.instance_types],
                                           ProductDescriptions=["Linux/UNIX"], MaxResults=1000)["SpotPriceHistory"]
    newest: dict[tuple[str, str], tuple] = {}
    for r in rows:
        key = (r["InstanceType"], r["AvailabilityZone"])
        if r["AvailabilityZone"] in zones and (key not in newest or r["Timestamp"] > newest[key][0]):
            newest[key] = (r["Timestamp"], r["SpotPrice"])
    return max(usd_to_micros(p) for _, p in newest.values())


class CountingEc2:
    """The provider's real client, counting spot price history calls (the edge this test looks at)."""

    def __init__(self, ec2):
        self.ec2, self.calls = ec2, 0

    def describe_spot_price_history(self, **kwargs):
        self.calls += 1
        return self.ec2.describe_spot_price_history(**kwargs)

    def __getattr__(self, name):
        return getattr(self.ec2, name)


def test_aws_pool_is_priced_from_spot_history_via_its_provider_client(aws_env):  # noqa: F811
    provider = make(aws_env)
    pool = provider.pool
    config = Config.model_validate({"pools": [pool.model_dump()], "cloud": FAST.model_dump(),
                                    "budget": {"default_account_usd": 100}})
    clock = FakeClock()
    counting = CountingEc2(provider.ec2)
    provider.ec2 = counting
    rec = Reconciler(config, FakeStore(clock), FakeAdapter(), {pool.name: provider}, first_rule, clock=clock)
    try:
        quotes = rec.prices()
        expected = newest_spot_price(aws_env.client(direct=True), pool, set(provider.subnet_zones().values()))
        assert expected != usd_to_micros(pool.price_per_hour)  # so the test tells the two sources apart
        assert quotes[(pool.name, "spot")].price_per_hour_micros == expected
        assert quotes[(pool.name, "on-demand")].price_per_hour_micros == usd_to_micros(0.2)  # configured
        assert rec.price_book.last.sources[(pool.name, "spot")] == "provider"
        assert counting.calls == 1
        # reused within the TTL, asked again after it
        rec.prices()
        assert counting.calls == 1
        clock.advance(PRICE_TTL_S + 1)
        rec.prices()
        assert counting.calls == 2
    finally:
        provider.close()


def test_pool_without_a_client_keeps_the_configured_price(aws_env):  # noqa: F811
    provider = make(aws_env)
    pool = provider.pool
    config = Config.model_validate({"pools": [pool.model_dump()], "cloud": FAST.model_dump(),
                                    "budget": {"default_account_usd": 100}})
    clock = FakeClock()
    rec = Reconciler(config, FakeStore(clock), FakeAdapter(), {}, first_rule, clock=clock)
    try:
        assert rec.prices()[(pool.name, "spot")].price_per_hour_micros == usd_to_micros(pool.price_per_hour)
    finally:
        provider.close()
