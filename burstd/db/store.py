"""The ``Store``: every read and write of burstd's durable state goes through here.

CONTRACT (filled in by the db work; signatures are what the daemon, CLI and policy code call):

    store = Store.open(config.database.url)     # runs Alembic migrations to head
    lease = store.create_lease(pool=..., node_name=..., market=..., price_per_hour_micros=...,
                               job_ids=(...), account=..., reason=...)   # committed before returning
    store.transition(lease.lease_id, LeaseState.LAUNCHING, reason="...", **fields)  # checked, evented
    store.leases(states=LIVE_STATES) / store.lease(lease_id) / store.lease_for_node(node) / store.events(...)
    store.set_budget(account, usd) / store.budget_book(period, now, config) -> BudgetBook
    store.add_spend(intervals) / store.spend(by="account", since=...)
    store.get_setting("paused") / store.set_setting("paused", "1")

Leases are returned as ``burstd.domain.lease.Lease`` (frozen), never as live ORM rows.
"""
