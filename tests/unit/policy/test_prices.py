"""Quotes from offerings (what providers answer), config fallback, Spot Advisor risk priors; and the daemon's
one price path (``burstd.daemon.prices``): providers asked, cached, AWS spot history through boto3 (moto)."""

from __future__ import annotations

import datetime

import boto3
import pytest
from moto import mock_aws
from policy_factories import config, pool

from burstd.daemon.prices import PRICE_TTL_S, RETRY_S, ProviderPrices
from burstd.policy import PriceError
from burstd.policy.prices import SpotAdvisor, price_table
from burstd.providers.aws.provider import newest_spot_prices
from burstd.providers.base import Offering
from tests.public_traces import public_trace

ADVISOR = {"ranges": [{"index": i, "label": "", "dots": i, "max": m} for i, m in enumerate((5, 11, 16, 22, 100))],
           "spot_advisor": {"us-east-1": {"Linux": {"c5.2xlarge": {"s": 60, "r": 0}, "p3.2xlarge": {"s": 70, "r": 4}}}}}


def aws_pool(types=("c5.2xlarge",), price=0.2):
    p = pool("aws-cpu", price=price, ondemand=0.34)
    p.update(provider="aws", aws={"region": "us-east-1", "subnets": ["subnet-1"], "launch_template": "lt-burstd"},
             instance_types=[{"name": t, "cpus": 8, "memory_mb": 16000} for t in types])
    return p


def test_static_prices_from_config():
    t = price_table(config())
    assert t.quotes[("aws-cpu", "spot")].price_per_hour_micros == 1_000_000
    assert t.quotes[("aws-cpu", "on-demand")].price_per_hour_micros == 3_000_000
    assert t.sources[("aws-cpu", "spot")] == "config"


def test_advisor_bucket_is_the_interruption_prior_and_the_worst_type_wins():
    adv = SpotAdvisor(ADVISOR)
    assert adv.interruption_rate("us-east-1", ["c5.2xlarge"]) == pytest.approx(0.025 / 730)
    assert adv.interruption_rate("us-east-1", ["c5.2xlarge", "p3.2xlarge"]) == pytest.approx(0.25 / 730)
    t = price_table(config(pools=[aws_pool()]), advisor=adv)
    assert t.quotes[("aws-cpu", "spot")].interruption_rate == pytest.approx(0.025 / 730)
    assert t.quotes[("aws-cpu", "on-demand")].interruption_rate == 0.0


def test_real_advisor_snapshot_loads():
    """The public Spot Advisor snapshot (its us-east-1 sample, or the whole under BURSTD_TRACES): the buckets
    it gives, read as the advisor's interruption ranges (c5.2xlarge 5-10%, p3.2xlarge >20% a month)."""
    adv = SpotAdvisor.load(public_trace("spot/spot-advisor-data.json"))
    assert adv.bucket("us-east-1", "c5.2xlarge") == 1 and adv.bucket("us-east-1", "p3.2xlarge") == 4
    assert adv.interruption_rate("us-east-1", ["c5.2xlarge"]) == pytest.approx(0.075 / 730)
    assert adv.interruption_rate("us-east-1", ["c5.2xlarge", "p3.2xlarge"]) == pytest.approx(0.25 / 730)
    assert adv.interruption_rate("us-east-1", ["no-such.type"]) is None


def spot(t="c5.2xlarge", z="us-east-1a"):
    return Offering(t, z, "spot")


def test_offerings_priced_by_the_provider_make_the_quote_and_the_worst_offering_wins():
    adv = SpotAdvisor(ADVISOR)
    offered = {"aws-cpu": {spot("c5.2xlarge", "us-east-1a"): 100_000, spot("c5.2xlarge", "us-east-1b"): 130_000,
                           spot("p3.2xlarge"): 120_000, Offering("c5.2xlarge", "us-east-1a", "on-demand"): 340_000}}
    t = price_table(config(pools=[aws_pool(("c5.2xlarge", "p3.2xlarge"))]), offerings=offered, advisor=adv)
    assert t.quotes[("aws-cpu", "spot")].price_per_hour_micros == 130_000
    assert t.sources[("aws-cpu", "spot")] == "provider"
    # per-offering priors: p3.2xlarge is in the worst bucket, and the pool may land on it
    assert t.quotes[("aws-cpu", "spot")].interruption_rate == pytest.approx(0.25 / 730)
    assert t.quotes[("aws-cpu", "on-demand")].price_per_hour_micros == 340_000
    assert t.quotes[("aws-cpu", "on-demand")].interruption_rate == 0.0
    with pytest.raises(PriceError, match="pool aws-cpu: price of c5.2xlarge/us-east-1a/spot"):
        price_table(config(pools=[aws_pool()]), offerings={"aws-cpu": {spot(): -1}})


class FakePricedProvider:
    """A provider's ``prices()`` only (the edge ProviderPrices talks to)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def prices(self):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer() if callable(self.answer) else self.answer


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


@mock_aws
def test_aws_spot_price_history_through_boto3():
    ec2 = boto3.client("ec2", region_name="us-east-1")
    rows = ec2.describe_spot_price_history(InstanceTypes=["c5.2xlarge", "c5a.2xlarge"],
                                           ProductDescriptions=["Linux/UNIX"])["SpotPriceHistory"]
    zones = sorted({r["AvailabilityZone"] for r in rows})
    provider = FakePricedProvider(lambda: newest_spot_prices(rows, zones) | {
        Offering("c5.2xlarge", zones[0], "on-demand"): 340_000})
    cfg = config(pools=[aws_pool(("c5.2xlarge", "c5a.2xlarge"))])
    t = ProviderPrices({"aws-cpu": provider}, Clock()).table(cfg)
    q = t.quotes[("aws-cpu", "spot")]
    assert t.sources[("aws-cpu", "spot")] == "provider"
    assert q.price_per_hour_micros >= 0 and t.quotes[("aws-cpu", "on-demand")].price_per_hour_micros == 340_000


def history(prices):
    return [{"InstanceType": "c5.2xlarge", "AvailabilityZone": f"us-east-1{z}", "SpotPrice": p,
             "Timestamp": datetime.datetime(2024, 1, 1, i, tzinfo=datetime.timezone.utc)}
            for i, (z, p) in enumerate(prices)]


def test_highest_newest_price_is_the_quote_and_nan_is_refused():
    zones = ["us-east-1a", "us-east-1b"]
    # newest per (type, AZ): the 0.50 of zone a is older than its 0.10
    newest = newest_spot_prices(history([("a", "0.50"), ("a", "0.10"), ("b", "0.13"), ("c", "9.0")]), zones)
    assert newest == {spot("c5.2xlarge", "us-east-1a"): 100_000, spot("c5.2xlarge", "us-east-1b"): 130_000}
    cfg = config(pools=[aws_pool()])
    t = ProviderPrices({"aws-cpu": FakePricedProvider(newest)}, Clock()).table(cfg)
    assert t.quotes[("aws-cpu", "spot")].price_per_hour_micros == 130_000
    nan = FakePricedProvider(lambda: newest_spot_prices(history([("a", "NaN")]), zones))
    book = ProviderPrices({"aws-cpu": nan}, Clock())
    with pytest.raises(PriceError, match="pool aws-cpu: not a finite amount"):
        book.table(cfg)
    with pytest.raises(PriceError, match="pool aws-cpu"):  # refused again from the cache, not re-asked
        book.table(cfg)
    assert nan.calls == 1


def test_unreachable_api_falls_back_to_config_with_a_warning():
    clock = Clock()
    down = FakePricedProvider(ConnectionError("no route"))
    book = ProviderPrices({"aws-cpu": down}, clock)
    t = book.table(config(pools=[aws_pool(price=0.2)]))
    assert t.quotes[("aws-cpu", "spot")].price_per_hour_micros == 200_000
    assert t.sources[("aws-cpu", "spot")] == "config"
    assert "pool aws-cpu: prices unavailable (no route)" in t.warnings[0]
    # asked again after RETRY_S, not every cycle; a good answer is then kept for PRICE_TTL_S
    book.table(config(pools=[aws_pool(price=0.2)]))
    assert down.calls == 1
    clock.t += RETRY_S + 1
    down.answer = {spot(): 150_000}
    assert book.quotes(config(pools=[aws_pool(price=0.2)]))[("aws-cpu", "spot")].price_per_hour_micros == 150_000
    clock.t += PRICE_TTL_S - 1
    book.quotes(config(pools=[aws_pool(price=0.2)]))
    assert down.calls == 2


def test_the_daemon_reads_a_spot_advisor_snapshot_named_in_the_config(tmp_path):
    """``cloud.spot_advisor_file``: the per-offering interruption priors reach the daemon's quotes."""
    import json

    from burstd.daemon.reconcile import Reconciler
    from tests.unit.daemon.fakes import FakeAdapter, FakeStore
    from tests.unit.daemon.first_rule import first_rule

    path = tmp_path / "spot-advisor-data.json"
    path.write_text(json.dumps(ADVISOR))
    cfg = config(pools=[aws_pool(("p3.2xlarge",))]).model_copy(
        update={"cloud": config().cloud.model_copy(update={"spot_advisor_file": str(path)})})
    rec = Reconciler(cfg, FakeStore(Clock()), FakeAdapter(), {}, first_rule, clock=Clock())
    assert rec.prices()[("aws-cpu", "spot")].interruption_rate == pytest.approx(0.25 / 730)
    plain = Reconciler(config(pools=[aws_pool(("p3.2xlarge",))]), FakeStore(Clock()), FakeAdapter(), {}, first_rule,
                       clock=Clock())
    assert plain.prices()[("aws-cpu", "spot")].interruption_rate == 0.0
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cloud.spot_advisor_file: .*cannot read the Spot Advisor data"):
        Reconciler(cfg, FakeStore(Clock()), FakeAdapter(), {}, first_rule, clock=Clock())
