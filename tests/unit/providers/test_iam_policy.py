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


def test_the_munge_secret_is_readable_only_tagged_for_this_cluster_from_its_vpc():
    """What docs/security.md promises: a read needs the secret tagged for this cluster and credentials of an
    instance in the cluster's VPC (a copied node credential used elsewhere reads nothing)."""
    node = json.loads((REPO / "docs/aws-iam-policy.json").read_text())["instance_role"]
    reads = [st for st in node["Statement"]
             if st["Action"] in ("secretsmanager:GetSecretValue", "ssm:GetParameter")]
    assert len(reads) == 2
    for st in reads:
        assert st["Condition"]["StringEquals"] == {"aws:ResourceTag/burstd:cluster": "CLUSTER_ID",
                                                   "aws:Ec2InstanceSourceVpc": "VPC_ID"}, st["Sid"]
    security = (REPO / "docs/security.md").read_text()
    assert "aws:ResourceTag/burstd:cluster" in security and "aws:Ec2InstanceSourceVpc" in security
