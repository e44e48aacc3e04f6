"""A job sent straight to a cloud partition (``sbatch -p cloud``) meets the same policy and budget as one burstd
chose, and a budget is charged only for what slurmdbd vouches for (issue 21 items 1 and 2).

The resume hook reaches the daemon before any snapshot holds such a job: the intake reads the hook's jobs from
Slurm (``Intake.read_jobs``), so the lease has the job's account, and the launch guard applies the exclusions,
the pool restrictions (``burstd.policy.eligibility``, decide()'s own rule), slurmdbd's associations and the
budget ($0 included) before any VM is asked for. The edges (Slurm, provider, store) are the conforming fakes.
"""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.daemon.associations import SlurmdbdAssociations, accounting_warnings
from burstd.daemon.reconcile import Reconciler
from burstd.domain.lease import LeaseState
from burstd.domain.slurm import Job
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

S = LeaseState
POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}


def _config(pool_accounts=None, **budget):
    pool = dict(POOL, **({"accounts": pool_accounts} if pool_accounts is not None else {}))
    return parse_config({
        "pools": [pool],
        "policy": {"onprem_partitions": ["onprem"], "exclude_accounts": ["excl"], "exclude_users": ["mallory"],
                   "exclude_qos": ["nocloud"]},
        "budget": budget or {"accounts": {"funded": 10, "broke": 0}},
    })


def _env(config):
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), FakeProvider("local", clock)
    rec = Reconciler(config, store, adapter, {"local": provider}, first_rule, clock=clock)
    return clock, store, adapter, provider, rec


def _straight_to_cloud(adapter, rec, job_id, account, user="alice", qos="normal", node="cloud1"):
    """``sbatch -p cloud -A account``: Slurm knows the job; the hook calls before any cycle's snapshot."""
    adapter.jobs.append(Job(job_id, "j", user, account, ("cloud",), "PENDING", qos=qos, time_limit_min=10))
    adapter.set_node(node, "IDLE", "POWERING_UP")
    assert rec.last_snapshot is None or rec.last_snapshot.job(job_id) is None
    rec.intake.request_resume([node], {node: (job_id,)})
    return next(x for x in rec.store.leases() if x.node_name == node)


def test_the_hook_reads_the_job_from_slurm_so_a_funded_job_launches_at_once():
    _, store, adapter, provider, rec = _env(_config())
    lease = _straight_to_cloud(adapter, rec, 11, "funded")
    assert lease.account == "funded"  # was '' (no snapshot held the job): refused, requeued, ~35 s lost
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.BOOTING and len(provider.live()) == 1
    assert not [e for e in store.events(lease.lease_id) if e.to_state == "REFUSED"]


@pytest.mark.parametrize("account, user, qos, why", [
    ("excl", "alice", "normal", "account excl is excluded"),
    ("funded", "mallory", "normal", "user mallory is excluded"),
    ("funded", "alice", "nocloud", "QOS nocloud is excluded"),
    ("broke", "alice", "normal", "account broke has $0.00 left"),  # a $0 budget
    ("nobudget", "alice", "normal", "account nobudget has no budget"),
])
def test_a_job_straight_to_the_cloud_meets_every_exclusion_and_budget(account, user, qos, why):
    _, store, adapter, provider, rec = _env(_config())
    lease = _straight_to_cloud(adapter, rec, 12, account, user, qos)
    assert lease.account == account
    rec.cycle()
    got = store.lease(lease.lease_id)
    assert got.state == S.REFUSED and why in got.reason, got.reason
    assert provider.launch_calls == [] and provider.live() == []


def test_pool_account_restrictions_hold_for_a_job_straight_to_the_cloud():
    _, store, adapter, provider, rec = _env(_config(pool_accounts=["funded"], accounts={"funded": 10, "other": 10}))
    lease = _straight_to_cloud(adapter, rec, 13, "other")
    rec.cycle()
    got = store.lease(lease.lease_id)
    assert got.state == S.REFUSED and "account other may not use pool local" in got.reason
    assert provider.launch_calls == []
    ok = _straight_to_cloud(adapter, rec, 14, "funded", node="cloud2")
    rec.cycle()
    assert store.lease(ok.lease_id).state == S.BOOTING


def test_a_failed_fresh_read_still_records_the_lease_and_launches_nothing_unjudged():
    _, store, adapter, provider, rec = _env(_config())

    def busy():
        raise RuntimeError("slurmctld busy")

    adapter.jobs.append(Job(15, "j", "alice", "excl", ("cloud",), "PENDING"))
    adapter.snapshot, real = busy, adapter.snapshot  # the hook's read fails; the hook still records its lease
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    rec.intake.request_resume(["cloud1"], {"cloud1": (15,)})
    adapter.snapshot = real
    lease = store.leases()[0]
    assert lease.account == ""  # nothing known of the job: the "(none)" budget, which this config does not fund
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.REFUSED and provider.launch_calls == []


# --- slurmdbd vouches (item 2) -----------------------------------------------------------------------
def _dbd(adapter, pairs):
    adapter.slurmdbd_associations = set(pairs)
    adapter.sacct = []  # a site with slurmdbd


def test_a_user_without_an_association_cannot_charge_a_funded_account():
    _, store, adapter, provider, rec = _env(_config())
    _dbd(adapter, {("", "funded"), ("alice", "funded")})
    lease = _straight_to_cloud(adapter, rec, 21, "funded", user="bob")
    rec.cycle()
    got = store.lease(lease.lease_id)
    assert got.state == S.REFUSED and "user 'bob' has no association with account 'funded'" in got.reason
    assert provider.launch_calls == []
    ok = _straight_to_cloud(adapter, rec, 22, "funded", user="alice", node="cloud2")
    rec.cycle()
    assert store.lease(ok.lease_id).state == S.BOOTING


def test_the_default_budget_is_never_given_to_an_account_slurmdbd_does_not_know():
    _, store, adapter, provider, rec = _env(_config(default_account_usd=100))
    _dbd(adapter, {("", "funded"), ("alice", "funded")})
    lease = _straight_to_cloud(adapter, rec, 23, "made-up")
    rec.cycle()
    got = store.lease(lease.lease_id)
    assert got.state == S.REFUSED and "'made-up' is not known to Slurm's accounting" in got.reason
    assert provider.launch_calls == []


def test_without_slurmdbd_the_account_is_taken_as_typed_and_the_daemon_says_so():
    _, store, adapter, provider, rec = _env(_config(default_account_usd=100))
    lease = _straight_to_cloud(adapter, rec, 24, "made-up")
    rec.cycle()
    assert store.lease(lease.lease_id).state == S.BOOTING
    (warning,) = accounting_warnings(adapter)
    assert "no slurmdbd" in warning and "AccountingStorageEnforce=associations" in warning
    _dbd(adapter, set())
    (warning,) = accounting_warnings(adapter)  # slurmdbd, but the fake (like the bed) does not enforce
    assert "does not enforce associations" in warning


def test_a_new_association_is_seen_at_once_and_a_silent_slurmdbd_refuses_once_the_copy_is_stale():
    clock, adapter = FakeClock(), FakeAdapter()
    _dbd(adapter, {("", "funded")})
    assoc = SlurmdbdAssociations(adapter, clock, ttl_s=60, recheck_s=5, stale_s=600)
    assert "no association" in assoc.refusal("alice", "funded")
    adapter.slurmdbd_associations = {("", "funded"), ("alice", "funded")}  # the admin adds it
    clock.advance(6)
    assert assoc.refusal("alice", "funded") is None  # read again at once, not a minute later

    def down():
        raise RuntimeError("slurmdbd not responding")

    adapter.associations = down
    clock.advance(120)
    assert assoc.refusal("alice", "funded") is None  # the last copy serves a while
    clock.advance(600)
    why = assoc.refusal("alice", "funded")
    assert why is not None and "could not be read" in why and "slurmdbd not responding" in why
    # a lease that names no account (no job known: the site's "(none)" budget) has nothing to vouch for
    assert assoc.refusal("", "") is None


def test_a_daemon_that_never_read_slurmdbd_refuses_named_accounts_but_not_a_lease_with_none():
    clock, adapter = FakeClock(), FakeAdapter()

    def down():
        raise RuntimeError("sacctmgr not found")

    adapter.associations = down
    assoc = SlurmdbdAssociations(adapter, clock)
    assert "could not be read" in (assoc.refusal("alice", "funded") or "")
    assert assoc.refusal("", "") is None


def test_a_slow_slurm_read_takes_at_most_half_the_hooks_wait():
    import time

    _, store, adapter, provider, rec = _env(_config())
    real = adapter.snapshot

    def slow():
        time.sleep(4.0)
        return real()

    adapter.jobs.append(Job(16, "j", "alice", "funded", ("cloud",), "PENDING"))
    adapter.snapshot = slow
    adapter.set_node("cloud1", "IDLE", "POWERING_UP")
    t0 = time.monotonic()
    out = rec.intake.request_resume(["cloud1"], {"cloud1": (16,)}, wait_s=0.4)
    assert time.monotonic() - t0 < 2.5  # the hook's answer is not held by Slurm's 4 s
    assert len(out["created"]) == 1 and store.leases()[0].account == ""  # recorded; nothing known of the job yet
