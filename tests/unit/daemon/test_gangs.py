"""Gangs: a multi-node job's cloud nodes are launched together, all or nothing (the pool's ``all_or_nothing``).

The reconcile cycle with fake edges (the real providers' gang launches are tested against moto and the fake
Compute Engine in tests/integration)."""

from __future__ import annotations

import pytest

from burstd.daemon.actions import Launch, Refuse
from burstd.daemon.planning import ResumeJob, plan_gangs, plan_launches, resume_order
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.budget import BudgetBook
from burstd.domain.lease import Lease, LeaseState
from burstd.providers.base import ErrorKind, Instance, LaunchRequest, ProviderError, launch_all_or_nothing
from tests.unit.daemon.test_daemon_reconcile import CFG
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeGangProvider, FakeProvider, FakeStore

S = LeaseState


def config(all_or_nothing: bool = True):
    pool = CFG.pools[0].model_copy(update={"all_or_nothing": all_or_nothing})
    return CFG.model_copy(update={"pools": [pool]})


@pytest.fixture
def env():
    clock = FakeClock()
    store = FakeStore(clock)
    adapter = FakeAdapter()
    provider = FakeGangProvider("local", clock)
    rec = Reconciler(config(), store, adapter, {"local": provider}, first_rule, clock=clock)
    return clock, store, adapter, provider, rec


def by_node(store) -> dict[str, Lease]:
    return {x.node_name: x for x in store.leases()}


# -- pure: which nodes form a gang -----------------------------------------------------------------------
def pool_of(node: str) -> str | None:
    return "a" if node.startswith("a") else "b" if node.startswith("b") else None


def test_plan_gangs_groups_the_nodes_of_each_multi_node_job_per_pool():
    jobs = {"a1": (7,), "a2": (7,), "a3": (7,), "a4": (8,), "a5": (9, 7), "b1": (7,), "b2": (7,), "a6": ()}
    leaders = plan_gangs(["a1", "a2", "a3", "a4", "a5", "b1", "b2", "a6", "x1"], jobs, pool_of, lambda p: True)
    assert leaders == {"a1": "a1", "a2": "a1", "a3": "a1", "b1": "b1", "b2": "b1"}  # a5 goes with its first job


def test_plan_gangs_leaves_pools_without_all_or_nothing_alone():
    jobs = {"a1": (7,), "a2": (7,), "b1": (8,), "b2": (8,)}
    assert plan_gangs(list(jobs), jobs, pool_of, lambda p: p == "b") == {"b1": "b1", "b2": "b1"}


def test_plan_launches_moves_a_gang_as_one():
    members = [Lease(f"g{i}", "local", f"cloud{i}", S.REQUESTED, created_at=i, gang="g1") for i in (1, 2, 3)]
    single = Lease("s1", "local", "cloud4", S.REQUESTED, created_at=4)
    assert plan_launches([*members, single], paused=False) == [Launch("g1"), Launch("s1")]
    # one member refused: the whole gang is refused, with the reason and why the others go too
    out = plan_launches([*members, single], paused=False,
                        refusal=lambda lease: "over budget" if lease.node_name == "cloud2" else None)
    assert out[:3] == [Refuse(m.lease_id, "over budget (gang of 3 nodes, all or nothing)") for m in members]
    assert out[3:] == [Launch("s1")]
    # one member's node still owns a VM being cleaned up: the whole gang waits
    old = Lease("old", "local", "cloud3", S.TERMINATING, created_at=0)
    assert plan_launches([*members, single, old], paused=False) == [Launch("s1")]
    assert plan_launches(members, paused=True) == [Refuse(m.lease_id, "bursting is paused (gang of 3 nodes, "
                                                          "all or nothing)") for m in members]


# -- the cycle -------------------------------------------------------------------------------------------
def test_a_multi_node_job_gets_one_gang_launched_in_one_call(env):
    _, store, _, provider, rec = env
    out = rec.intake.request_resume(["cloud1", "cloud2", "cloud3", "cloud4"],
                             {"cloud1": (7,), "cloud2": (7,), "cloud3": (7,), "cloud4": (8,)})
    leases = by_node(store)
    gang = leases["cloud1"].lease_id
    assert [leases[n].gang for n in ("cloud1", "cloud2", "cloud3", "cloud4")] == [gang, gang, gang, None]
    assert len(out["created"]) == 4
    rec.cycle()
    assert provider.gang_calls == [(gang, tuple(leases[n].lease_id for n in ("cloud1", "cloud2", "cloud3")))]
    assert provider.launch_calls == [leases["cloud4"].lease_id]
    assert {n: x.state for n, x in by_node(store).items()} == dict.fromkeys(leases, S.BOOTING)
    assert {i.node_name for i in provider.live()} == set(leases)


def test_pool_without_all_or_nothing_launches_each_node_on_its_own():
    clock = FakeClock()
    store, provider = FakeStore(clock), FakeGangProvider("local", clock)
    rec = Reconciler(config(all_or_nothing=False), store, FakeAdapter(), {"local": provider}, first_rule,
                     clock=clock)
    rec.intake.request_resume(["cloud1", "cloud2"], {"cloud1": (7,), "cloud2": (7,)})
    rec.cycle()
    assert provider.gang_calls == [] and len(provider.launch_calls) == 2
    assert all(x.gang is None and x.state == S.BOOTING for x in store.leases())


def test_no_capacity_for_the_whole_gang_fails_every_member_and_sends_the_job_on_prem(env):
    _, store, adapter, provider, rec = env
    provider.fail_next = ErrorKind.CAPACITY
    adapter.add_job(7, "CONFIGURING", "cloud[1-2]")
    rec.intake.request_resume(["cloud1", "cloud2"], {"cloud1": (7,), "cloud2": (7,)})
    rec.cycle()
    assert {x.state for x in store.leases()} <= {S.FAILED, S.TERMINATED}
    assert all("launch failed (capacity)" in x.reason for x in store.leases())
    assert provider.live() == [] and len(provider.gang_calls) == 1
    assert ("requeue", 7) in adapter.calls and ("remove_partition", 7, "cloud") in adapter.calls
    assert {c[1] for c in adapter.calls if c[0] == "power_down"} >= {("cloud1",), ("cloud2",)}


def test_throttled_gang_launch_is_retried_whole_once_per_cycle(env):
    clock, store, _, provider, rec = env
    provider.fail_next = ErrorKind.THROTTLED
    rec.intake.request_resume(["cloud1", "cloud2"], {"cloud1": (7,), "cloud2": (7,)})
    rec.cycle()
    assert {x.state for x in store.leases()} == {S.LAUNCHING}
    clock.advance(10)
    rec.cycle()  # both members are LAUNCHING and stale: two Launch(retry) actions, one provider call
    assert len(provider.gang_calls) == 2 and {x.state for x in store.leases()} == {S.BOOTING}
    assert len(provider.live()) == 2


def test_sequential_fallback_terminates_the_members_made_when_one_fails():
    clock = FakeClock()

    class OneByOne(FakeProvider):  # a provider without its own gang launch
        def launch(self, request):
            if request.node_name == "cloud3":
                raise ProviderError(ErrorKind.CAPACITY, "no room", code="NoCapacity")
            return super().launch(request)

    provider = OneByOne("local", clock)
    requests = [LaunchRequest(f"L{i}", f"cloud{i}", "local") for i in (1, 2, 3)]
    with pytest.raises(ProviderError):
        launch_all_or_nothing(provider, "L1", requests)
    assert provider.launch_calls == ["L1", "L2"] and provider.live() == []
    assert len(provider.terminate_calls) == 2
    made = launch_all_or_nothing(provider, "L1", requests[:2])
    assert [i.node_name for i in made] == ["cloud1", "cloud2"] and isinstance(made[0], Instance)


# -- pure: what 26.05's resume file adds (priority, exclusive) --------------------------------------------------
def test_a_shared_node_goes_with_its_highest_priority_job_where_slurm_says():
    jobs = {"a1": (7,), "a2": (7, 9), "a3": (9,)}
    info = {7: ResumeJob.of(7, 10, "NO"), 9: ResumeJob.of(9, 500, "NO")}
    assert plan_gangs(list(jobs), jobs, pool_of, lambda p: True, info) == {"a2": "a2", "a3": "a2"}
    # without priorities (before 26.05) the node keeps going with its first job
    assert plan_gangs(list(jobs), jobs, pool_of, lambda p: True) == {"a1": "a1", "a2": "a1"}


@pytest.mark.parametrize(("exclusive", "gang"), [("NODE", True), ("USER", True), ("NO", False), (None, False)])
def test_an_exclusive_job_is_a_gang_even_in_a_pool_that_launches_nodes_one_by_one(exclusive, gang):
    jobs = {"a1": (7,), "a2": (7,)}
    leaders = plan_gangs(list(jobs), jobs, pool_of, lambda p: False, {7: ResumeJob.of(7, 1, exclusive)})
    assert leaders == ({"a1": "a1", "a2": "a1"} if gang else {})


def test_leases_are_recorded_highest_priority_first_and_slurms_order_stays_without_priorities():
    jobs = {"a1": (7,), "a2": (7,), "a3": (8,), "a4": (), "a5": (9,)}
    info = {7: ResumeJob.of(7, 5), 8: ResumeJob.of(8, 90), 9: ResumeJob.of(9, 5)}
    assert resume_order(list(jobs), jobs, info) == ["a3", "a1", "a2", "a5", "a4"]
    assert resume_order(list(jobs), jobs, {}) == list(jobs)


def test_when_the_budget_holds_one_gang_the_higher_priority_gang_launches():
    """Money for one 2-node gang: the resume call's second job, of higher priority (26.05's resume file), gets
    it; the other gang is refused whole. Before 26.05 the first job would have."""
    clock = FakeClock()

    class SiteBudget(FakeStore):
        # $0.70 for the site: the guard wants $0.54 left for a node (65 min at $0.50) and counts each approved
        # one at ~$0.09 until a job shows on it, so two nodes pass and the third does not
        def budget_book(self, period, now, config=None):
            return BudgetBook(period_start=now - 86400, period_end=now + 86400, site_limit_micros=700_000)

    store, provider = SiteBudget(clock), FakeGangProvider("local", clock)
    rec = Reconciler(config(), store, FakeAdapter(), {"local": provider}, first_rule, clock=clock)
    rec.intake.request_resume(["cloud1", "cloud2", "cloud3", "cloud4"],
                       {"cloud1": (7,), "cloud2": (7,), "cloud3": (8,), "cloud4": (8,)},
                       info={7: ResumeJob.of(7, 10, "NO"), 8: ResumeJob.of(8, 900, "NODE")})
    rec.cycle()
    states = {n: x.state for n, x in by_node(store).items()}
    assert states["cloud3"] != S.REFUSED and states["cloud4"] != S.REFUSED, states
    assert states["cloud1"] == S.REFUSED and states["cloud2"] == S.REFUSED, states
