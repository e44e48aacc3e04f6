"""Price sources: config, AWS spot price history through boto3 (moto), Spot Advisor risk priors."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws
from policy_factories import config, pool

from burstd.policy import PriceError
from burstd.policy.prices import SpotAdvisor, price_table

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


def test_real_advisor_snapshot_loads(shared_dir):
    adv = SpotAdvisor.load(shared_dir / "traces/spot/spot-advisor-data.json")
    assert adv.interruption_rate("us-east-1", ["c5.2xlarge"]) is not None


@mock_aws
def test_aws_spot_price_history_through_boto3():
    cfg = config(pools=[aws_pool(("c5.2xlarge", "c5a.2xlarge"))])
    t = price_table(cfg, aws_client=lambda p: boto3.client("ec2", region_name=p.aws.region))
    q = t.quotes[("aws-cpu", "spot")]
    assert t.sources[("aws-cpu", "spot")] == "aws-spot-history"
    assert q.price_per_hour_micros >= 0 and t.quotes[("aws-cpu", "on-demand")].price_per_hour_micros == 340_000


class _FakeEc2:  # an edge this test does not exercise: what AWS answers
    def __init__(self, prices):
        self.prices = prices

    def describe_spot_price_history(self, **kw):
        import datetime
        return {"SpotPriceHistory": [
            {"InstanceType": "c5.2xlarge", "AvailabilityZone": f"us-east-1{z}", "SpotPrice": p,
             "Timestamp": datetime.datetime(2024, 1, 1, i)} for i, (z, p) in enumerate(self.prices)]}


def test_highest_newest_price_is_the_quote_and_nan_is_refused():
    cfg = config(pools=[aws_pool()])
    t = price_table(cfg, aws_client=lambda p: _FakeEc2([("a", "0.10"), ("b", "0.13")]))
    assert t.quotes[("aws-cpu", "spot")].price_per_hour_micros == 130_000
    with pytest.raises(PriceError, match="pool aws-cpu: price must be a finite amount"):
        price_table(cfg, aws_client=lambda p: _FakeEc2([("a", "NaN")]))


def test_unreachable_api_falls_back_to_config_with_a_warning():
    def boom(p):
        raise ConnectionError("no route")
    t = price_table(config(pools=[aws_pool(price=0.2)]), aws_client=boom)
    assert t.quotes[("aws-cpu", "spot")].price_per_hour_micros == 200_000
    assert "spot price history unavailable" in t.warnings[0]
