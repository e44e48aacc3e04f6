"""The one orphan rule (``providers.orphans.find_orphans``), shared by the daemon's sweep and ``burstctl cloud gc``."""

from __future__ import annotations

import pytest

from burstd.domain.lease import Lease, LeaseState as S
from burstd.providers.base import Instance
from burstd.providers.orphans import find_orphans


def inst(iid, lease, launched=0.0, state="running", gang=None):
    return Instance(instance_id=iid, lease_id=lease, node_name="n", pool="p", state=state, launched_at=launched,
                    extra={"gang": gang} if gang else {})


def lease(lid, state=S.READY, gang=None):
    return Lease(lid, "p", f"node-{lid}", state, gang=gang)


def ids(orphans):
    return [o.instance.instance_id for o in orphans]


def test_orphans_are_owned_by_no_open_lease_and_older_than_the_grace():
    instances = [
        inst("i-live", "L1"),
        inst("i-failed-lease", "L7"),  # a FAILED lease still owns its VM until it is cleaned up
        inst("i-dead-lease", "L2"),
        inst("i-untagged", ""),
        inst("i-young", "L3", launched=950.0),
        inst("i-gone", "L4", state="terminated"),
        inst("i-preempted", "L5", state="preempted"),
        inst("i-stopping", "L6", state="stopping"),  # a stopped VM still costs (its disk): not gone
    ]
    out = find_orphans(instances, [lease("L1"), lease("L7", S.FAILED)], now=1000.0, grace_s=120)
    assert ids(out) == ["i-dead-lease", "i-stopping", "i-untagged"]
    assert out[0].reason == "lease L2 is not open; up 1000s (grace 120s)"
    assert out[2].reason == "untagged instance; up 1000s (grace 120s)"


def test_grace_zero_takes_young_ones_too():
    assert ids(find_orphans([inst("i-young", "L3", launched=999.0)], [], now=1000.0, grace_s=0)) == ["i-young"]


@pytest.mark.parametrize("state", [S.REQUESTED, S.LAUNCHING])
def test_an_untagged_gang_vm_is_spared_while_its_gang_launches(state):
    """A gang's VMs carry only the gang's tag until the launch labels each with its lease: a crash in between
    leaves them so, and the gang's relaunch labels them. `burstctl cloud gc` once killed these (issue 20)."""
    vm = inst("i-9", "", gang="G1")
    assert find_orphans([vm], [lease("G1", state, gang="G1")], now=1000.0, grace_s=0) == []


@pytest.mark.parametrize("leases", [[lease("G1", S.BOOTING, gang="G1")], [lease("G2", S.LAUNCHING, gang="G2")], []])
def test_an_untagged_gang_vm_is_an_orphan_once_its_gang_launched_without_it_or_is_gone(leases):
    vm = inst("i-9", "", gang="G1")
    assert ids(find_orphans([vm], leases, now=1000.0, grace_s=0)) == ["i-9"]


def test_a_tagged_vm_of_a_launching_gang_is_judged_by_its_own_lease():
    vm = inst("i-3", "L3", gang="G1")  # labelled: its lease is gone, whatever the gang does
    assert ids(find_orphans([vm], [lease("G1", S.LAUNCHING, gang="G1")], now=1000.0, grace_s=0)) == ["i-3"]
