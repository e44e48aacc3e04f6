"""Pool health in the loop: an exhausted pool sends its jobs back on-prem and says why; boot failures protect a
pool until an admin clears it; the capacity cooldown survives a restart (real SQLite store)."""

from __future__ import annotations

import pytest


from burstd.daemon.pools import PoolHealth
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.first_rule import first_rule
from burstd.domain.lease import LeaseState
from burstd.domain.slurm import Job
from burstd.providers.base import ErrorKind, Offering
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState


def make(cfg=CFG):
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(cfg, store, adapter, {"local": provider}, first_rule, clock=clock)
    return clock, store, adapter, provider, rec


def test_capacity_failure_sends_jobs_on_prem_keeps_reason_and_blocks_the_pool_until_cooldown_ends():
    clock, store, adapter, provider, rec = make()
    provider.fail_next = ErrorKind.CAPACITY
    rec.intake.request_resume(["cloud1"], {"cloud1": (6,)})
    rec.cycle()
    rec.cycle()
    lease = store.leases()[0]
    assert lease.state == S.TERMINATED and "capacity" in lease.reason and "injected" in lease.reason
    assert ("remove_partition", 6, "cloud") in adapter.calls

    # another job that waited long enough would normally be made eligible: not while the pool is exhausted,
    # and a job that already has the cloud partition loses it (it runs on-prem)
    adapter.jobs = [Job(7, "j", "u", "a", ("onprem",), "PENDING", reason="Resources", submit_time=clock() - 3600),
                    Job(8, "j", "u", "a", ("onprem", "cloud"), "PENDING", reason="Resources")]
    adapter.calls.clear()
    rec.cycle()
    assert not any(c[0] == "add_partition" for c in adapter.calls), adapter.calls
    assert ("remove_partition", 8, "cloud") in adapter.calls
    assert not any(c[0] == "release_hold" for c in adapter.calls)

    # Slurm holds a job whose cloud node failed to launch: burstd releases it (and only that kind of hold)
    adapter.jobs += [Job(6, "j", "u", "a", ("onprem",), "PENDING", reason="launch_failed_requeued_held"),
                     Job(10, "j", "u", "a", ("onprem",), "PENDING", reason="JobHeldUser", hold=True)]
    adapter.calls.clear()
    rec.cycle()
    assert ("release_hold", 6) in adapter.calls and ("release_hold", 10) not in adapter.calls
    # however Slurm words it, a held job whose lease failed is released
    adapter.jobs[-2] = Job(6, "j", "u", "a", ("onprem",), "PENDING", reason="JobHeldAdmin", hold=True)
    adapter.calls.clear()
    rec.cycle()
    assert ("release_hold", 6) in adapter.calls and ("release_hold", 10) not in adapter.calls
    health = rec.health.status()["local"]
    assert not health["launching"] and "injected" in health["last_launch_failure"]["text"]
    assert health["blocked_reason"].startswith("last launch failure: ")

    # a resume for the exhausted pool is refused with that reason, no provider call
    provider.launch_calls.clear()
    rec.intake.request_resume(["cloud2"], {"cloud2": (9,)})
    rec.cycle()
    refused = next(x for x in store.leases() if x.node_name == "cloud2")
    assert refused.state == S.REFUSED and "last launch failure" in refused.reason and provider.launch_calls == []

    # after the cooldown the pool launches again, and a success clears the failure
    clock.advance(CFG.cloud.capacity_cooldown_s + 1)
    rec.cycle()
    assert any(c == ("add_partition", 7, "cloud") for c in adapter.calls)
    rec.intake.request_resume(["cloud3"], {"cloud3": (7,)})
    rec.cycle()
    assert next(x for x in store.leases() if x.node_name == "cloud3").state == S.BOOTING
    assert rec.health.status()["local"]["last_launch_failure"] is None


def test_boot_failures_protect_the_pool_until_unprotected():
    cfg = CFG.model_copy(update={"cloud": CFG.cloud.model_copy(update={"protect_after_boot_failures": 2})})
    clock, store, _adapter, provider, rec = make(cfg)
    for i, node in enumerate(["cloud1", "cloud2"]):
        rec.intake.request_resume([node], {node: (i + 1,)})
        rec.cycle()
        clock.advance(cfg.daemon.boot_timeout_s + 1)
        rec.cycle()
        rec.cycle()
    assert all(x.state == S.TERMINATED for x in store.leases())
    health = rec.health.status()["local"]
    assert health["protected"] and "2 consecutive boot failures" in health["protected_reason"]

    provider.launch_calls.clear()
    rec.intake.request_resume(["cloud3"])
    rec.cycle()
    lease = next(x for x in store.leases() if x.node_name == "cloud3")
    assert lease.state == S.REFUSED and "protected mode" in lease.reason and provider.launch_calls == []

    # what `burstctl cloud unprotect local` asks the daemon for (POST /v1/pools/local/unprotect)
    assert "boot" in rec.health.unprotect("local")
    with pytest.raises(LookupError, match="not in protected mode"):
        rec.health.unprotect("local")
    rec.intake.request_resume(["cloud4"])
    rec.cycle()
    assert next(x for x in store.leases() if x.node_name == "cloud4").state == S.BOOTING


def test_a_ready_node_resets_the_boot_failure_count():
    clock, store, adapter, _provider, rec = make()
    rec.health.record_boot_failure("local", "boot timeout")
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    rec.intake.request_resume(["cloud1"])
    rec.cycle()
    adapter.set_node("cloud1", "IDLE")
    clock.advance(5)
    rec.cycle()
    assert store.leases()[0].state == S.READY
    assert rec.health.status()["local"]["consecutive_boot_failures"] == 0


def test_capacity_cooldown_is_saved_and_restored_across_a_restart(tmp_path):
    from burstd.db.store import Store

    clock = FakeClock()
    url = f"sqlite:///{tmp_path}/burstd.db"
    store = Store.open(url)
    off = Offering("m5.large", "us-east-1a", "spot")
    PoolHealth(store, CFG, clock).cooldown.mark(off, reason="InsufficientInstanceCapacity")
    again = PoolHealth(Store.open(url), CFG, clock)  # a new daemon
    assert again.cooldown.is_cooling(off)
    assert again.cooldown.active()[0].reason == "InsufficientInstanceCapacity"
    clock.advance(CFG.cloud.capacity_cooldown_s + 1)
    assert not PoolHealth(Store.open(url), CFG, clock).cooldown.is_cooling(off)
