"""Issue 9 item 10: the wall clock jumps (+30 days, -30 days) while a VM boots and runs. Timeouts and spend follow
the time that really passed; a launch time far from the lease's creation is never billed. Real SQLite store;
the cloud and Slurm are fakes; the wall and monotonic clocks are the test's."""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.daemon.planning import LAUNCH_SKEW_S, sane_launch_time
from burstd.daemon.reconcile import Reconciler
from burstd.daemon.steady_clock import SteadyClock
from burstd.db.store import Store
from burstd.domain.lease import LeaseState
from tests.unit.daemon.fakes import FakeAdapter, FakeProvider
from tests.unit.daemon.first_rule import first_rule

DAY = 86400.0
T0 = 1_800_000_000.0


class Clocks:
    def __init__(self):
        self.wall, self.mono = T0, 1000.0

    def tick(self, s: float) -> None:  # real time passes: both clocks move
        self.wall += s
        self.mono += s

    def step(self, s: float) -> None:  # someone sets the wall clock
        self.wall += s


def test_the_steady_clock_follows_slews_but_not_steps():
    c = Clocks()
    steady = SteadyClock(lambda: c.wall, lambda: c.mono, max_step_s=5)
    assert steady() == T0
    c.tick(10)
    c.wall += 0.5  # NTP slew
    assert steady() == T0 + 10.5
    c.step(30 * DAY)
    assert steady() == pytest.approx(T0 + 10.5) and steady.steps == 1
    c.tick(60)
    assert steady() == pytest.approx(T0 + 70.5) and steady.steps == 1  # one step, reported once
    c.step(-60 * DAY)
    c.tick(1)
    assert steady() == pytest.approx(T0 + 71.5) and steady.steps == 2


@pytest.mark.parametrize("reported, expected", [
    (T0 + 3, T0 + 3),  # the provider's own time: billed from there
    (T0 - 200 * DAY, T0 - LAUNCH_SKEW_S),  # "launched" months before it was asked for
    (T0 + 10 * DAY, T0 + 60),  # in the future
    (float("nan"), T0 + 60),
])
def test_a_launch_time_is_billed_only_within_sane_bounds(reported, expected):
    assert sane_launch_time(reported, created_at=T0, now=T0 + 60) == expected


@pytest.fixture
def daemon(tmp_path):
    cfg = parse_config({
        "api": {"socket": str(tmp_path / "b.sock")},
        "daemon": {"state_dir": str(tmp_path), "boot_timeout_s": 600, "launch_timeout_s": 300},
        "database": {"url": f"sqlite:///{tmp_path}/burstd.db"},
        "budget": {"default_account_usd": 10_000, "accrual_interval_s": 1},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 3.6}],  # $0.001 a second: spend reads as seconds billed
    })
    c = Clocks()
    clock = SteadyClock(lambda: c.wall, lambda: c.mono)
    store = Store.open(cfg.database.url)
    provider = FakeProvider("local", clock)
    rec = Reconciler(cfg, store, FakeAdapter(), {"local": provider}, first_rule, clock=clock)
    yield c, rec, store
    store.close()


def _booting(rec, store):
    rec.intake.request_resume(["cloud1"])
    rec.cycle()
    lease = store.lease_for_node("cloud1")
    assert lease.state == LeaseState.BOOTING, lease
    return lease


def _billed_seconds(store) -> float:
    return sum(store.spend(by="pool").values()) / 1000.0  # micro-dollars at $0.001/s


@pytest.mark.parametrize("step", [30 * DAY, -30 * DAY])
def test_a_wall_clock_step_neither_fails_a_booting_lease_nor_bills_the_jump(daemon, step):
    c, rec, store = daemon
    lease = _booting(rec, store)
    c.tick(100)
    c.step(step)
    c.tick(100)
    rec.cycle()
    now = store.lease(lease.lease_id)
    assert now.state == LeaseState.BOOTING, now  # 200 s of a 600 s boot allowance, whatever the wall says
    assert 150 <= _billed_seconds(store) <= 250  # what really passed, not 30 days ($2,592) nor nothing
    c.tick(500)  # the allowance really runs out: the timeout still works
    rec.cycle()
    assert store.lease(lease.lease_id).state in (LeaseState.FAILED, LeaseState.TERMINATING, LeaseState.TERMINATED)
