from __future__ import annotations

from burstd.providers.base import Instance
from burstd.providers.orphans import find_orphans


def inst(iid, lease, launched=0.0, state="running"):
    return Instance(instance_id=iid, lease_id=lease, node_name="n", pool="p", state=state, launched_at=launched)


def test_orphans_are_untracked_and_older_than_the_grace():
    instances = [
        inst("i-live", "L1"),
        inst("i-dead-lease", "L2"),
        inst("i-untagged", ""),
        inst("i-young", "L3", launched=950.0),
        inst("i-gone", "L4", state="terminated"),
        inst("i-preempted", "L5", state="preempted"),
        inst("i-stopping", "L6", state="stopping"),
    ]
    out = find_orphans(instances, {"L1"}, now=1000.0, grace_s=120)
    assert [o.instance.instance_id for o in out] == ["i-dead-lease", "i-untagged"]
    assert "no burstd:lease tag" in out[1].reason and "lease L2 is not live" in out[0].reason


def test_grace_zero_takes_young_ones_too():
    out = find_orphans([inst("i-young", "L3", launched=999.0)], set(), now=1000.0, grace_s=0)
    assert len(out) == 1
