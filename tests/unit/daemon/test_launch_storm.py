"""Launch storms: the launches of a cycle run through a bounded pool (``daemon.launch_workers``) and keep what one
at a time promised: a lease's moves in order, one launch per node at a time, one failure touching nothing else,
the fence checked with every intent, the real store safe from the workers (docs/ha.md, "Launch storms")."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from burstd.config import ConfigError, parse_config
from burstd.daemon.actions import Fail, Launch
from burstd.daemon.executor import CycleContext, CycleReport, Executor
from burstd.daemon.leadership import Elector
from burstd.daemon.launch_pool import LaunchPool
from burstd.daemon.metrics import Metrics
from burstd.daemon.reconcile import Reconciler
from burstd.domain.leadership import Fence, Fenced, LeaderRecord
from burstd.db.store import Store
from burstd.domain.lease import LeaseState
from burstd.providers.base import ErrorKind, ProviderError
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

S = LeaseState
NODES = 32


def config(workers: int):
    return parse_config({
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": NODES, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
        "policy": {"onprem_partitions": ["onprem"]},
        "budget": {"default_account_usd": 10_000},
        "daemon": {"launch_workers": workers},
    })


class WatchedProvider(FakeProvider):
    """A provider that records how many launches are inside it at once (in all and per node), can hold each
    launch until ``gate`` launches are inside together (a barrier: it breaks, failing the launch, if they never
    are), and can fail chosen nodes."""

    def __init__(self, name, clock, *, gate: int = 0, hold_s: float = 0.0, gate_timeout_s: float = 10.0):
        super().__init__(name, clock)
        self.barrier = threading.Barrier(gate, timeout=gate_timeout_s) if gate else None
        self.hold_s = hold_s
        self.fail: dict[str, Exception] = {}  # node -> what its launch raises
        self.slow: dict[str, float] = {}  # node -> seconds its launch takes
        self._lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.per_node: Counter[str] = Counter()
        self.most_per_node = 0
        self.order: list[tuple[str, str]] = []  # ("in" | "out", node)

    def launch(self, request):
        node = request.node_name
        with self._lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.per_node[node] += 1
            self.most_per_node = max(self.most_per_node, self.per_node[node])
            self.order.append(("in", node))
        try:
            if node in self.fail:
                raise self.fail[node]
            if self.barrier is not None:
                self.barrier.wait()
            time.sleep(self.slow.get(node, self.hold_s))
            with self._lock:
                return super().launch(request)
        finally:
            with self._lock:
                self.inside -= 1
                self.per_node[node] -= 1
                self.order.append(("out", node))


def storm(workers: int, n: int, provider_kwargs: dict | None = None, store=None):
    clock = FakeClock()
    store = store if store is not None else FakeStore(clock)
    adapter = FakeAdapter()
    provider = WatchedProvider("local", clock, **(provider_kwargs or {}))
    rec = Reconciler(config(workers), store, adapter, {"local": provider}, first_rule, clock=clock)
    nodes = [f"cloud{i}" for i in range(1, n + 1)]
    for node in nodes:
        adapter.set_node(node, "IDLE", "POWERING_UP")
    rec.intake.request_resume(nodes)
    return rec, store, provider, nodes


def states(store):
    return Counter(x.state for x in store.leases())


def test_a_resume_storm_launches_concurrently():
    # the provider lets no launch through until 8 are inside it at once: one at a time, each would break the gate
    rec, store, provider, _ = storm(8, 16, {"gate": 8})
    report = rec.cycle()
    assert report.errors == []
    assert states(store) == {S.BOOTING: 16}
    assert provider.most_inside == 8 and len(provider.live()) == 16


def test_the_pool_is_bounded_by_launch_workers():
    # groups of 3 pass the gate; a fourth launch inside at any moment would show in most_inside
    rec, store, provider, _ = storm(3, 12, {"gate": 3})
    rec.cycle()
    assert states(store) == {S.BOOTING: 12}
    assert provider.most_inside == 3


def test_one_launch_worker_launches_one_after_another():
    rec, store, provider, _ = storm(1, 6, {"hold_s": 0.01})
    rec.cycle()
    assert states(store) == {S.BOOTING: 6} and provider.most_inside == 1
    assert rec.last_report.actions["Launch"] == 6


def test_a_failing_launch_does_not_touch_the_others(unexpected_cycle_errors):
    rec, store, provider, nodes = storm(8, 12, {"gate": 5})  # the ten that succeed pass the gate five at a time
    provider.fail = {"cloud3": ProviderError(ErrorKind.CONFIG, "bad template", code="InvalidTemplate"),
                     "cloud7": RuntimeError("a bug in the provider")}
    report = rec.cycle()
    by_node = {x.node_name: x for x in store.leases()}
    assert by_node["cloud3"].state in (S.FAILED, S.TERMINATED) and "bad template" in by_node["cloud3"].reason
    assert by_node["cloud7"].state == S.LAUNCHING  # the intent stays: the next cycle calls launch again
    assert {n for n, x in by_node.items() if x.state == S.BOOTING} == set(nodes) - {"cloud3", "cloud7"}
    assert len(provider.live()) == 10
    assert [e for e in report.errors if "a bug in the provider" in e] == ["Launch: a bug in the provider"]
    assert report.actions["Launch"] == 11  # the failed config launch is carried out (as a failure); the bug is not
    # the bug is logged as one (with its traceback); the provider's CONFIG error is the weather
    assert [r.exc_info[1] for r in unexpected_cycle_errors.records] == [provider.fail["cloud7"]]


def test_a_lease_s_next_action_waits_for_its_launch_and_a_node_is_launched_once_at_a_time():
    clock = FakeClock()
    store = FakeStore(clock)
    provider = WatchedProvider("local", clock)
    provider.slow = {"cloud1": 0.3, "cloud3": 0.3}
    one, two, three = (store.create_lease(pool="local", node_name=f"cloud{i}") for i in (1, 2, 3))
    report = CycleReport()
    ex = Executor(store, FakeAdapter(), {"local": provider}, config(8), Metrics(), clock=clock)
    # one's launch is slow; its Fail, given after it, is applied after it
    ex.apply([Launch(one.lease_id), Launch(two.lease_id), Fail(one.lease_id, "taken back", power_down=False)],
             CycleContext(report))
    assert [(e.from_state, e.to_state) for e in store.events(one.lease_id)] == [
        (None, S.REQUESTED), (S.REQUESTED, S.LAUNCHING), (S.LAUNCHING, S.BOOTING), (S.BOOTING, S.FAILED)]
    assert store.lease(two.lease_id).state == S.BOOTING
    assert provider.most_inside == 2  # both nodes at once
    # a second Launch of a lease whose launch is in flight waits for it, then finds nothing left to launch
    ex.apply([Launch(three.lease_id), Launch(three.lease_id, retry=True)], CycleContext(report))
    assert provider.launch_calls.count(three.lease_id) == 1 and provider.most_per_node == 1
    assert store.lease(three.lease_id).state == S.BOOTING
    assert report.errors == []


def test_a_gang_is_one_launch_whichever_member_actions_name_it():
    clock = FakeClock()
    store = FakeStore(clock)
    provider = WatchedProvider("local", clock, hold_s=0.05)
    members = [store.create_lease(pool="local", node_name=f"cloud{i}", gang="g1",
                                  lease_id="g1" if i == 1 else None) for i in (1, 2, 3)]
    ex = Executor(store, FakeAdapter(), {"local": provider}, config(8), Metrics(), clock=clock)
    ex.apply([Launch(m.lease_id, retry=True) for m in members], CycleContext())
    assert {store.lease(m.lease_id).state for m in members} == {S.BOOTING}
    assert sorted(provider.launch_calls) == sorted(m.lease_id for m in members)  # one per node, never two


def test_one_executor_launches_a_gang_once_per_cycle_and_again_in_the_next_cycle():
    clock = FakeClock()
    store = FakeStore(clock)
    provider = FakeProvider("local", clock)
    provider.fail_next = ErrorKind.THROTTLED  # the first cycle's gang call is throttled: retried next cycle
    members = [store.create_lease(pool="local", node_name=f"cloud{i}", gang="g1",
                                  lease_id="g1" if i == 1 else None) for i in (1, 2)]
    ex = Executor(store, FakeAdapter(), {"local": provider}, config(1), Metrics(), clock=clock)
    first, second = CycleReport(), CycleReport()
    ex.apply([Launch(m.lease_id) for m in members], CycleContext(first))
    assert {store.lease(m.lease_id).state for m in members} == {S.LAUNCHING} and len(provider.launch_calls) == 1
    assert first.gangs_launched == {"g1"} and not first.again
    ex.apply([Launch(m.lease_id, retry=True) for m in members], CycleContext(second))
    assert {store.lease(m.lease_id).state for m in members} == {S.BOOTING}
    assert second.gangs_launched == {"g1"} and second.again and second.actions == {"Launch": 2}


def test_gangs_launch_concurrently_with_each_other():
    clock = FakeClock()
    store = FakeStore(clock)
    provider = WatchedProvider("local", clock, gate=2)  # a member of each gang inside at once, or the gate breaks
    gangs = {g: [store.create_lease(pool="local", node_name=f"cloud{g}{i}", gang=f"g{g}",
                                    lease_id=f"g{g}" if i == 1 else None) for i in (1, 2)] for g in (1, 2)}
    report = CycleReport()
    ex = Executor(store, FakeAdapter(), {"local": provider}, config(8), Metrics(), clock=clock)
    ex.apply([Launch(m.lease_id) for members in gangs.values() for m in members], CycleContext(report))
    assert report.errors == [] and {x.state for x in store.leases()} == {S.BOOTING}
    assert provider.most_inside == 2 and len(provider.launch_calls) == 4


def test_a_leader_deposed_mid_storm_starts_no_launch_after_the_fence_refuses_one():
    clock = FakeClock()
    store = FakeStore(clock)
    adapter = FakeAdapter()
    provider = WatchedProvider("local", clock, hold_s=0.05)
    elector = Elector(store, "head-a:1:x", lease_s=15, clock=clock)
    elector.tick()
    rec = Reconciler(config(2), store, adapter, {"local": provider}, first_rule, clock=clock, leadership=elector)
    nodes = [f"cloud{i}" for i in range(1, 11)]
    for node in nodes:
        adapter.set_node(node, "IDLE", "POWERING_UP")
    rec.intake.request_resume(nodes)
    real_launch = provider.launch

    def launch_then_lose_the_lead(request):
        cur = store._leader  # another head took over while this call was in the cloud
        store._leader = LeaderRecord("head-b:1:y", cur.epoch + 1, clock(), clock(), clock() + 15, clock())
        return real_launch(request)

    provider.launch = launch_then_lose_the_lead
    report = rec.cycle()
    assert report.role == "deposed"
    launched = set(provider.launch_calls)
    # only launches whose LAUNCHING was committed under the old epoch reached the cloud: at most the pool's width
    assert 1 <= len(launched) <= 2
    intents = {x.lease_id for x in store.leases() if x.state != S.REQUESTED}
    assert launched <= intents and len(intents) <= 2
    assert elector.fence is None


def test_the_real_store_takes_launches_from_every_worker(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/burstd.db")
    try:
        assert store.concurrent
        rec, store, provider, nodes = storm(8, 24, {"gate": 8}, store=store)
        report = rec.cycle()
        assert report.errors == [] and states(store) == {S.BOOTING: 24}
        for lease in store.leases():
            assert [(e.from_state, e.to_state) for e in store.events(lease.lease_id)] == [
                (None, S.REQUESTED), (S.REQUESTED, S.LAUNCHING), (S.LAUNCHING, S.BOOTING)]
        assert provider.most_inside == 8
    finally:
        store.close()


def test_an_in_memory_store_shares_one_connection_so_launches_go_one_at_a_time():
    store = Store.open("sqlite://")
    try:
        assert not store.concurrent
        ex = Executor(store, FakeAdapter(), {}, config(8), Metrics())
        assert ex.launch_workers == 1
    finally:
        store.close()


def test_the_pool_refuses_a_width_below_one_and_re_raises_a_fence_on_the_caller_s_thread():
    with pytest.raises(ValueError, match="at least one worker"):
        LaunchPool(0)
    pool = LaunchPool(2)
    started = []

    def deposed():
        raise Fenced(Fence("head-a:1:x", 1), None)

    pool.submit({"a"}, deposed)
    pool.wait_for(None)
    with pytest.raises(Fenced):
        pool.submit({"b"}, lambda: started.append("b"))
    with pytest.raises(Fenced):
        pool.close()
    assert started == []


@pytest.mark.parametrize("value", [0, 65, -1, "many"])
def test_launch_workers_out_of_bounds_is_refused_naming_file_and_key(value):
    with pytest.raises(ConfigError) as info:
        parse_config({"daemon": {"launch_workers": value}}, "/etc/burstd/burstd.toml")
    assert "/etc/burstd/burstd.toml: " in str(info.value) and "daemon.launch_workers" in str(info.value)
