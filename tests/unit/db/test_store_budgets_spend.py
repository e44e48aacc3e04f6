"""Budgets, the spend ledger's storage and queries, settings and cooldowns in the Store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from burstd.config import parse_config
from burstd.db.store import OVERHEAD, BudgetError, LeaseNotFound, SpendConflict
from burstd.domain.budget import SITE, SpendInterval

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC).timestamp()  # a Tuesday
HOUR = 3600.0


def _iv(lease_id, start, end, cost, *, account="chem", job=None, user=None, pool="aws-a", price=1_000_000):
    return SpendInterval(lease_id, pool, account, start, end, price, cost, job, user)


@pytest.mark.parametrize("bad", ["-1", -0.01, "nan", float("nan"), "inf", float("-inf"), "lots", "", "0.0000001"])
def test_bad_budget_is_refused_with_a_clear_error_and_nothing_written(store, bad):
    store.set_budget("chem", "100")
    with pytest.raises(BudgetError, match="budget for account chem"):
        store.set_budget("chem", bad)
    assert [(b.account, b.limit_micros) for b in store.budgets()] == [("chem", 100_000_000)]


def test_bad_account_or_period_is_refused(store):
    with pytest.raises(BudgetError, match="not a valid account name"):
        store.set_budget("chem; rm -rf /", "5")
    with pytest.raises(BudgetError, match="unknown budget period 'year'"):
        store.set_budget("chem", "5", period="year")
    assert store.budgets() == []


def test_set_budget_overrides_and_is_exact(store):
    store.set_budget("chem", "412.37", at=1.0)
    store.set_budget("chem", "$1,000.000001", at=2.0)
    store.set_budget(SITE, 5000, at=3.0)
    store.set_budget("bio", "0")
    got = {(b.account, b.period): (b.limit_micros) for b in store.budgets()}
    assert got == {("chem", "month"): 1_000_000_001, (SITE, "month"): 5_000_000_000, ("bio", "month"): 0}
    assert store.clear_budget("bio") is True and store.clear_budget("bio") is False


def test_float_budgets_round_to_the_micro_dollar(store):
    assert store.set_budget("chem", 0.1 + 0.2).limit_micros == 300_000  # 0.30000000000000004
    assert store.set_budget("chem", 12.3456785).limit_micros == 12_345_678
    with pytest.raises(BudgetError):
        store.set_budget("chem", True)


def test_budget_book_merges_config_database_and_period_spend(store):
    cfg = parse_config({"budget": {"period": "week", "site_usd": 900, "burn_rate_usd_per_hour": 12.5,
                                   "accounts": {"chem": 100, "phys": 50}}})
    lease = store.create_lease(pool="aws-a", node_name="n1", account="chem")
    monday = datetime(2026, 3, 9, tzinfo=UTC).timestamp()
    store.add_spend([
        _iv(lease.lease_id, monday - HOUR, monday, 7_000_000),  # last week: not counted
        _iv(lease.lease_id, monday, monday + HOUR, 3_000_000, job=1, user="ann"),
        _iv(lease.lease_id, monday + HOUR, monday + 2 * HOUR, 1_000_000),
        _iv(lease.lease_id, monday + 2 * HOUR, monday + 3 * HOUR, 2_500_000, account="astro", job=2),
    ])
    store.set_budget("phys", "75", period="week")  # the database wins over the config
    store.set_budget("phys", "1", period="month")  # another period: ignored for a weekly book
    store.set_budget(SITE, "1000", period="week")
    book = store.budget_book(None, T0, cfg)
    assert (book.period_start, book.period_end) == (monday, monday + 7 * 24 * HOUR)
    assert book.site_limit_micros == 1_000_000_000 and book.site_spent_micros == 6_500_000
    assert book.burn_rate_cap_micros_per_hour == 12_500_000
    assert {a: (b.limit_micros, b.spent_micros) for a, b in book.accounts.items()} == {
        "astro": (None, 2_500_000),  # spent but no budget: the policy decides (default_account_usd)
        "chem": (100_000_000, 4_000_000),
        "phys": (75_000_000, 0),
    }


def test_budget_book_month_and_day_bounds(store):
    month = store.budget_book("month", T0)
    assert month.period_start == datetime(2026, 3, 1, tzinfo=UTC).timestamp()
    assert month.period_end == datetime(2026, 4, 1, tzinfo=UTC).timestamp()
    day = store.budget_book("day", T0)
    assert day.period_end - day.period_start == 24 * HOUR and day.site_limit_micros is None


def test_spend_grouping_and_time_range(store):
    a = store.create_lease(pool="aws-a", node_name="n1", account="chem")
    b = store.create_lease(pool="gcp-b", node_name="n2", account="bio")
    store.add_spend([
        _iv(a.lease_id, T0, T0 + 60, 100, job=11, user="ann"),
        _iv(a.lease_id, T0 + 60, T0 + 120, 40),
        _iv(a.lease_id, T0 + 120, T0 + 180, 5, job=12, user="bob"),
    ])
    store.add_spend([_iv(b.lease_id, T0 + 30, T0 + 90, 300, account="bio", job=21, user="ann", pool="gcp-b")])
    assert store.spend("account") == {"bio": 300, "chem": 145}
    assert store.spend("user") == {"ann": 400, OVERHEAD: 40, "bob": 5}
    assert store.spend("job") == {"21": 300, "11": 100, OVERHEAD: 40, "12": 5}
    assert store.spend("pool") == {"gcp-b": 300, "aws-a": 145}
    assert store.spend("lease") == {b.lease_id: 300, a.lease_id: 145}
    assert store.spend("account", since=T0 + 60) == {"chem": 45}
    assert store.spend("account", since=T0, until=T0 + 60) == {"bio": 300, "chem": 100}
    assert store.spend_series("account", until=T0 + 61) == [(T0, "chem", 100), (T0 + 30, "bio", 300),
                                                             (T0 + 60, "chem", 40)]
    assert store.lease(a.lease_id).accrued_until == T0 + 180
    assert sum(iv.cost_micros for iv in store.spend_intervals(a.lease_id)) == 145
    with pytest.raises(ValueError, match="cannot group spend by 'qos'"):
        store.spend("qos")


def test_spend_overlapping_what_is_recorded_is_refused_whole(store):
    a = store.create_lease(pool="aws-a", node_name="n1", account="chem")
    store.add_spend([_iv(a.lease_id, T0, T0 + 60, 100)])
    b = store.create_lease(pool="aws-a", node_name="n2", account="chem")
    with pytest.raises(SpendConflict, match=f"lease {a.lease_id}: spend from"):
        store.add_spend([_iv(b.lease_id, T0, T0 + 60, 7), _iv(a.lease_id, T0 + 30, T0 + 90, 50)])
    assert store.spend("lease") == {a.lease_id: 100}  # b's interval was not written either
    assert store.lease(b.lease_id).accrued_until is None
    store.add_spend([_iv(a.lease_id, T0 + 60, T0 + 90, 50)])
    assert store.spend("account") == {"chem": 150}
    with pytest.raises(LeaseNotFound):
        store.add_spend([_iv("nope", T0, T0 + 1, 1)])
    with pytest.raises(ValueError, match="bad spend interval"):
        store.add_spend([_iv(a.lease_id, T0 + 100, T0 + 99, 1)])


def test_money_columns_hold_more_than_32_bits(store):
    a = store.create_lease(pool="aws-a", node_name="n1", account="chem", price_per_hour_micros=98_000_000_000)
    store.set_budget("chem", "10000000")  # $10M = 1e13 micros
    store.add_spend([_iv(a.lease_id, T0, T0 + 3600, 98_000_000_000, price=98_000_000_000)])
    assert store.spend("account") == {"chem": 98_000_000_000}
    assert store.budgets()[0].limit_micros == 10_000_000_000_000
    assert store.lease(a.lease_id).price_per_hour_micros == 98_000_000_000


def test_settings_round_trip(store):
    assert store.get_setting("paused") is None and store.get_setting("paused", "0") == "0"
    store.set_setting("paused", "1")
    store.set_setting("paused", "0")
    store.set_setting("note", "maintenance window")
    assert store.settings() == {"note": "maintenance window", "paused": "0"}
    with pytest.raises(TypeError, match="values are strings"):
        store.set_setting("paused", True)  # type: ignore[arg-type]


def test_cooldowns_expire(store):
    store.set_cooldown("aws-a/p4d.24xlarge/us-east-1a/spot", until=200.0, reason="InsufficientInstanceCapacity")
    store.set_cooldown("gcp-b/a2/us-central1-a/spot", until=100.0, reason="ZONE_RESOURCE_POOL_EXHAUSTED")
    assert set(store.cooldowns(now=150.0)) == {"aws-a/p4d.24xlarge/us-east-1a/spot"}
    assert store.cooldowns(now=150.0)["aws-a/p4d.24xlarge/us-east-1a/spot"].reason == "InsufficientInstanceCapacity"
    store.set_cooldown("gcp-b/a2/us-central1-a/spot", until=300.0, reason="again")
    assert set(store.cooldowns(now=250.0)) == {"gcp-b/a2/us-central1-a/spot"}
    assert store.prune_cooldowns(now=250.0) == 1
    assert set(store.cooldowns(now=0.0)) == {"gcp-b/a2/us-central1-a/spot"}


def test_allocations_are_remembered_and_updated(store):
    from burstd.domain.budget import Allocation

    lease = store.create_lease(pool="aws-a", node_name="n1", account="chem")
    store.record_allocations(lease.lease_id, [Allocation(7, T0, None, "bio", "ann", 4)])
    store.record_allocations(lease.lease_id, [Allocation(7, T0, T0 + 600, "bio", "ann", 4),  # it ended
                                              Allocation(8, T0 + 10, None, "chem", "bob")])
    store.record_allocations(lease.lease_id, [Allocation(7, T0 + 900, None, "bio", "ann", 4)])  # requeued here
    assert store.allocations(lease.lease_id) == [
        Allocation(7, T0, T0 + 600, "bio", "ann", 4),
        Allocation(8, T0 + 10, None, "chem", "bob", 1),
        Allocation(7, T0 + 900, None, "bio", "ann", 4),
    ]
    with pytest.raises(LeaseNotFound):
        store.record_allocations("nope", [Allocation(1, T0)])
    with pytest.raises(ValueError, match="weight"):
        store.record_allocations(lease.lease_id, [Allocation(9, T0, weight=0)])
    assert len(store.allocations(lease.lease_id)) == 3


def test_price_history_comes_from_the_event_log(store):
    from burstd.domain.budget import PricePoint

    lease = store.create_lease(pool="aws-a", node_name="n1", price_per_hour_micros=100, at=T0)
    store.transition(lease.lease_id, "LAUNCHING", "go", at=T0 + 1)
    store.update(lease.lease_id, "spot price changed", price_per_hour_micros=250, at=T0 + 50)
    store.note(lease.lease_id, "unrelated", at=T0 + 60)
    store.transition(lease.lease_id, "BOOTING", "up", at=T0 + 70, price_per_hour_micros=300, launched_at=T0 + 65)
    assert store.price_points(lease.lease_id) == [PricePoint(T0, 100), PricePoint(T0 + 50, 250),
                                                  PricePoint(T0 + 70, 300)]


def test_ledger_accrual_every_cycle_lands_exactly_in_the_store(store):
    """The daemon's loop: record who is on the node, accrue since the recorded point, store it; a retry of a
    written chunk is refused; the stored total equals the lease's cost to the micro-dollar."""
    from burstd.domain.budget import Allocation
    from burstd.domain.lease import LeaseState as S
    from burstd.domain.ledger import accrue, lease_cost

    lease = store.create_lease(pool="aws-a", node_name="n1", account="chem", price_per_hour_micros=1_234_567, at=T0)
    store.transition(lease.lease_id, S.LAUNCHING, "go", at=T0)
    store.transition(lease.lease_id, S.BOOTING, "up", launched_at=T0 + 0.25, at=T0 + 5)
    seen = {  # what each cycle's snapshot shows running on the node
        T0 + 61.3: [],
        T0 + 122.9: [Allocation(1, T0 + 100, None, "bio", "ann")],
        T0 + 1999.99: [Allocation(1, T0 + 100, None, "bio", "ann")],
        T0 + 2600.1: [Allocation(1, T0 + 100, T0 + 2500, "bio", "ann"), Allocation(2, T0 + 2000, None, "chem", "bob", 3)],
        T0 + 4000.7: [Allocation(2, T0 + 2000, T0 + 3900, "chem", "bob", 3)],
    }
    for now, allocs in seen.items():
        if now > T0 + 2000.5 and store.lease(lease.lease_id).price_per_hour_micros != 2_345_678:
            store.update(lease.lease_id, "spot price changed", price_per_hour_micros=2_345_678, at=T0 + 2000.5)
        store.record_allocations(lease.lease_id, allocs)
        ivs = accrue(store.lease(lease.lease_id), now, prices=store.price_points(lease.lease_id),
                     allocations=store.allocations(lease.lease_id))
        store.add_spend(ivs)
        with pytest.raises(SpendConflict):
            store.add_spend(ivs)  # the same chunk again (a crash after commit, then a retry): refused
    store.transition(lease.lease_id, S.TERMINATING, "idle", at=T0 + 4050)
    done = store.transition(lease.lease_id, S.TERMINATED, "gone", ended_at=T0 + 4100.0, at=T0 + 4101)
    prices = store.price_points(lease.lease_id)
    store.add_spend(accrue(done, T0 + 5000, prices=prices, allocations=store.allocations(lease.lease_id)))
    total = lease_cost(done, T0 + 5000, prices)
    assert sum(store.spend("account").values()) == total
    assert store.lease(lease.lease_id).accrued_until == T0 + 4100.0
    by_job = store.spend("job")
    assert set(by_job) == {"1", "2", OVERHEAD} and sum(by_job.values()) == total
    # the price change is in force from its time: nothing before T0+2000.5 is charged at the new price
    assert all((iv.price_per_hour_micros == 2_345_678) == (iv.start >= T0 + 2000.5)
               for iv in store.spend_intervals(lease.lease_id))
    # an allocation seen late (first seen at 122.9 though it began at 100) is still charged from its start
    assert min(iv.start for iv in store.spend_intervals(lease.lease_id) if iv.job_id == 1) == T0 + 100


def test_accrue_spend_follows_jobs_on_and_off_the_node(store):
    """The daemon's whole accrual duty in two calls a cycle: tell the Store who is on the node, accrue."""
    from burstd.domain.budget import Allocation
    from burstd.domain.lease import LeaseState as S
    from burstd.domain.ledger import lease_cost

    lease = store.create_lease(pool="aws-a", node_name="n1", account="chem", price_per_hour_micros=3_600_000, at=T0)
    lid = lease.lease_id
    assert store.accrue_spend(lid, T0 + 100) == []  # not launched: nothing to charge
    store.transition(lid, S.LAUNCHING, "go", at=T0)
    store.transition(lid, S.BOOTING, "up", at=T0 + 1, launched_at=T0)
    store.transition(lid, S.READY, "registered", at=T0 + 60)
    # cycle at +120: job 5 runs since +60
    store.record_allocations(lid, [Allocation(5, T0 + 60, None, "bio", "ann")])
    store.close_allocations(lid, T0 + 120, still_running=[5])
    store.accrue_spend(lid, T0 + 120)
    # cycle at +300: job 5 is gone (ended between snapshots; we saw it last at +120, it is closed at +300)
    store.close_allocations(lid, T0 + 300, still_running=[])
    store.accrue_spend(lid, T0 + 300)
    assert store.accrue_spend(lid, T0 + 300) == []  # called twice: nothing left to do
    store.transition(lid, S.TERMINATING, "idle", at=T0 + 400)
    done = store.transition(lid, S.TERMINATED, "gone", at=T0 + 401, ended_at=T0 + 400)
    store.accrue_spend(lid, T0 + 10_000)
    assert store.allocations(lid) == [Allocation(5, T0 + 60, T0 + 300, "bio", "ann")]
    # $3.60/h = 1,000 micros a second
    assert store.spend("job") == {"5": 240_000, OVERHEAD: 160_000}
    assert store.spend("account") == {"bio": 240_000, "chem": 160_000}
    assert sum(store.spend("job").values()) == lease_cost(done, T0 + 10_000) == 400_000


def test_two_accruers_at_once_record_the_spend_once(db_url):
    import threading

    from burstd.db.store import Store
    from burstd.domain.lease import LeaseState as S

    setup = Store.open(db_url)
    lease = setup.create_lease(pool="aws-a", node_name="n1", account="chem", price_per_hour_micros=3_600_000)
    setup.transition(lease.lease_id, S.LAUNCHING, "go")
    setup.transition(lease.lease_id, S.BOOTING, "up", launched_at=T0)
    barrier = threading.Barrier(4)
    written: list[int] = []

    def accruer() -> None:
        s = Store.open(db_url, migrate_to_head=False)
        barrier.wait()
        written.append(sum(iv.cost_micros for iv in s.accrue_spend(lease.lease_id, T0 + 3 * HOUR)))
        s.close()

    threads = [threading.Thread(target=accruer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(written) == [0, 0, 0, 3 * 3_600_000]
    assert setup.spend("account") == {"chem": 3 * 3_600_000}
    setup.close()


def test_job_markets_are_recorded_replaced_and_forgotten(store):
    """The market decided for a job (``burstd.daemon.markets``): one row a job, upserted, deleted by None."""
    assert store.job_markets() == {}
    store.set_job_market(7, "on-demand")
    store.set_job_market(8, "on-demand")
    store.set_job_market(8, "spot")
    assert store.job_markets() == {7: "on-demand", 8: "spot"}
    store.set_job_market(8, None)
    assert store.job_markets() == {7: "on-demand"}
    assert store.forget_job_markets([7, 9]) == 1 and store.forget_job_markets([]) == 0
    assert store.job_markets() == {}
