"""docs/aws-iam-policy.json allows every EC2 call the AWS provider makes, and the node role only its secret."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _actions(policy: dict) -> set[str]:
    out: set[str] = set()
    for st in policy["Statement"]:
        acts = st["Action"]
        out |= {acts} if isinstance(acts, str) else set(acts)
    return out


def test_every_ec2_call_of_the_provider_is_in_the_daemon_policy():
    source = (REPO / "burstd/providers/aws/provider.py").read_text()
    calls = set(re.findall(r"self\.ec2\.([a-z_]+)\(", source)) - {"get_paginator", "close"}
    calls |= set(re.findall(r'get_paginator\("([a-z_]+)"\)', source))
    assert {"create_fleet", "terminate_instances", "describe_instances"} <= calls
    needed = {"ec2:" + "".join(w.capitalize() for w in c.split("_")) for c in calls}
    allowed = _actions(json.loads((REPO / "docs/aws-iam-policy.json").read_text())["daemon"])
    assert needed <= allowed, f"missing from the daemon policy: {sorted(needed - allowed)}"


def test_the_instance_role_reads_secrets_and_nothing_else():
    node = json.loads((REPO / "docs/aws-iam-policy.json").read_text())["instance_role"]
    assert _actions(node) == {"secretsmanager:GetSecretValue", "ssm:GetParameter", "kms:Decrypt"}
    assert all(st["Resource"] != "*" for st in node["Statement"])
