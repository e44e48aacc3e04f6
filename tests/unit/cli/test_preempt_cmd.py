"""burstctl preempt: refuses what it cannot preempt, with a message naming the node."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app

CONFIG = """
[[pools]]
name = "local"
provider = "local"
partition = "cloud"
node_prefix = "cloud"
node_count = 4
price_per_hour = 0.1
instance_types = [{name = "ns", cpus = 2, memory_mb = 1000}]
[pools.local]
netns_prefix = "zz-agent-test-"

[[pools]]
name = "aws"
provider = "aws"
partition = "aws"
node_prefix = "aws"
node_count = 2
price_per_hour = 0.5
instance_types = [{name = "c5.large", cpus = 2, memory_mb = 4000}]
[pools.aws]
region = "us-east-1"
subnets = ["subnet-1"]
launch_template = "burstd-compute"
"""


@pytest.mark.parametrize(
    "node,message",
    [
        ("cloud9", "belongs to no configured pool"),
        ("aws1", "only local VMs can be preempted"),
        ("cloud2", "has no running VM (netns zz-agent-test-cloud2 not found)"),
        ("x;rm", "invalid node name"),
    ],
)
def test_preempt_refuses_with_a_clear_message(tmp_path, node, message):
    cfg = tmp_path / "burstd.toml"
    cfg.write_text(CONFIG)
    r = CliRunner().invoke(app, ["preempt", node, "-c", str(cfg)])
    assert r.exit_code == 1
    assert message in " ".join(r.output.split())


def test_negative_notice_is_refused(tmp_path):
    cfg = tmp_path / "burstd.toml"
    cfg.write_text(CONFIG)
    r = CliRunner().invoke(app, ["preempt", "cloud1", "--notice", "-5", "-c", str(cfg)])
    assert r.exit_code == 2


def test_notice_zero_says_the_vm_was_powered_off_without_notice():
    from burstd.cli.preempt_cmd import preempt_message

    off = preempt_message("cloud2", "sl-cloud2", 0, 1_800_000_000.0, 1_800_000_000.0)
    assert off == "node cloud2 (netns sl-cloud2): powered off without notice at 2027-01-15T08:00:00Z"
    assert "notice given" not in off
    given = preempt_message("cloud2", "sl-cloud2", 30, 1_800_000_030.0, 1_800_000_000.0)
    assert given == ("node cloud2 (netns sl-cloud2): preemption notice given, reclaimed at 2027-01-15T08:00:30Z "
                     "(in 30 s)")
