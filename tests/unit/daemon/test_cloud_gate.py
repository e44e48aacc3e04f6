"""The rule on cloud nodes already up (issue 21 item 1), through the daemon's cycle: a node that is up runs any job
of its partition without a resume call, so the launch guard never sees such a job. Each cycle the cloud gate sets
the partition's DenyAccounts from the exclusions and the budgets (on top of the admin's own, only when it
changes), holds a pending job the partition cannot refuse (an excluded user, a user slurmdbd does not associate
with the account), requeues and holds one that started anyway, and releases its own holds once the rule allows.
The edges (Slurm, provider, store) are the conforming fakes."""

from __future__ import annotations

import json

from burstd.config import parse_config
from burstd.daemon.reconcile import Reconciler
from burstd.domain.budget import AccountBudget, BudgetBook
from burstd.domain.partition_access import PartitionAccess
from burstd.domain.slurm import Job
from tests.unit.daemon.fakes import FakeClock, FakeGateAdapter, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}


def _config(tmp_path, exclude_users=("mallory",), **budget):
    return parse_config({
        "pools": [POOL],
        "daemon": {"state_dir": str(tmp_path / "state")},
        "policy": {"onprem_partitions": ["onprem"], "exclude_accounts": ["excl"], "exclude_users": list(exclude_users)},
        "budget": budget or {"accounts": {"funded": 10, "broke": 0}},
    })


def _env(tmp_path, adapter=None, clock=None, **kw):
    clock = clock or FakeClock()
    adapter = adapter or FakeGateAdapter({"cloud": PartitionAccess(deny=("legacy",))})
    rec = Reconciler(_config(tmp_path, **kw), FakeStore(clock), adapter, {"local": FakeProvider("local", clock)},
                     first_rule, clock=clock)
    return clock, adapter, rec


def _job(jid, user="alice", account="funded", partitions=("cloud",), state="PENDING", **kw):
    return Job(jid, "j", user, account, partitions, state, time_limit_min=10, **kw)


def _sets(adapter):
    return [c for c in adapter.calls if c[0] == "set_partition_access"]


def test_unfunded_and_excluded_accounts_are_denied_on_top_of_the_admins_and_written_once(tmp_path):
    _, adapter, rec = _env(tmp_path)
    rec.cycle()
    rec.cycle()
    assert adapter.access["cloud"] == PartitionAccess(deny=("broke", "excl", "legacy"))
    assert len(_sets(adapter)) == 1  # idempotent: nothing changed, nothing written
    assert adapter.reads == 1  # the partition is read again only every reread_s


def test_a_refunded_account_leaves_the_deny_list_and_the_admins_entry_stays(tmp_path, monkeypatch):
    clock, adapter, rec = _env(tmp_path)
    rec.cycle()
    refunded = BudgetBook(0, 1e12, accounts={"broke": AccountBudget("broke", 5_000_000)})  # burstctl budget set
    monkeypatch.setattr(rec.store, "budget_book", lambda *a, **k: refunded)
    rec.cycle()
    assert adapter.access["cloud"] == PartitionAccess(deny=("excl", "legacy"))


def test_a_reconfigure_that_restored_slurm_conf_makes_that_the_admins_base(tmp_path):
    clock, adapter, rec = _env(tmp_path)
    rec.cycle()
    adapter.access["cloud"] = PartitionAccess(deny=("other",))  # scontrol reconfigure: slurm.conf's lines again
    clock.advance(61)
    rec.cycle()
    assert adapter.access["cloud"] == PartitionAccess(deny=("broke", "excl", "other"))


def test_an_excluded_users_job_is_held_then_released_once_the_rule_allows_even_after_a_restart(tmp_path):
    clock, adapter, rec = _env(tmp_path)
    adapter.jobs = [_job(1, user="mallory"), _job(2), _job(3, user="mallory", hold=True)]  # 3: someone's hold
    rec.cycle()
    holds = [c for c in adapter.calls if c[0] == "hold"]
    assert [c[1] for c in holds] == [1] and "user mallory is excluded" in holds[0][2]
    assert json.loads((tmp_path / "state" / "cloud_holds.json").read_text())["held"] == {
        "1": "user mallory is excluded"}
    # the admin lifts the exclusion and restarts the daemon: the new one releases burstd's hold, not user 3's
    _, _, rec2 = _env(tmp_path, adapter=adapter, clock=clock, exclude_users=())
    rec2.cycle()
    assert [c[1] for c in adapter.calls if c[0] == "release"] == [1]
    assert rec2.cloud_gate.held == {}


def test_a_refused_job_found_running_on_a_cloud_node_is_requeued_and_held(tmp_path):
    _, adapter, rec = _env(tmp_path)
    adapter.jobs = [_job(1, user="mallory", state="RUNNING", nodes="cloud1"),
                    _job(2, account="broke", state="RUNNING", nodes="cloud2")]  # money: weighed at launch
    rec.cycle()
    assert [c[1] for c in adapter.calls if c[0] == "requeue_hold"] == [1]
    assert adapter.jobs[0].hold and adapter.jobs[0].state == "PENDING"


def test_an_unassociated_pair_keeps_its_onprem_partition_and_is_never_made_eligible(tmp_path):
    _, adapter, rec = _env(tmp_path, exclude_users=())
    adapter.associations = lambda: {("alice", "funded"), ("", "funded")}  # bob is not associated with funded
    adapter.accounting_enabled = lambda: True
    adapter.jobs = [_job(1, user="bob", partitions=("onprem", "cloud")), _job(2, user="bob", partitions=("onprem",))]
    rec.cycle()
    assert ("remove_partition", 1, "cloud") in adapter.calls
    assert not [c for c in adapter.calls if c[0] == "add_partition" and c[1] == 2]


def test_excluded_users_this_host_knows_are_reserved_out_of_every_cloud_node_and_let_back_in(tmp_path):
    from burstd.domain.partition_access import CloudReservation

    clock, adapter, rec = _env(tmp_path, exclude_users=("root", "no-such-user-here"))  # Slurm refuses unknown users
    rec.cycle()
    rec.cycle()
    want = CloudReservation(("cloud1", "cloud2", "cloud3", "cloud4"), ("root",))
    assert adapter.reservations == {"burstd_" + rec.config.cluster.id: want}
    assert len([c for c in adapter.calls if c[0] == "set_cloud_reservation"]) == 1  # written once
    _, _, rec2 = _env(tmp_path, adapter=adapter, clock=clock, exclude_users=())  # the exclusion lifted
    rec2.cycle()
    assert adapter.reservations == {}


def test_explain_says_burstd_holds_the_job_and_why(tmp_path):
    from burstd.daemon.control import DaemonControl
    from burstd.domain.jobref import JobRef

    _, adapter, rec = _env(tmp_path)
    adapter.jobs = [_job(1, user="mallory"), _job(2)]
    rec.cycle()
    rec.cycle()
    ctl = DaemonControl(rec, rec.config)
    answer = ctl.explain(JobRef(1))
    assert answer["held_by_burstd"] == "user mallory is excluded"
    assert "held by burstd: user mallory is excluded" in answer["sentence"]
    assert ctl.explain(JobRef(2))["held_by_burstd"] is None


def test_a_newly_excluded_user_joins_the_reservation_in_place_and_a_refused_update_falls_back_to_a_new_one(tmp_path):
    from burstd.domain.partition_access import CloudReservation

    clock, adapter, rec = _env(tmp_path, exclude_users=("root",))
    rec.cycle()
    name = "burstd_" + rec.config.cluster.id
    user = __import__("pwd").getpwuid(65534).pw_name  # nobody: a second user this host knows
    _, _, rec2 = _env(tmp_path, adapter=adapter, clock=clock, exclude_users=("root", user))
    rec2.cycle()
    assert adapter.reservations[name].denied_users == tuple(sorted(("root", user)))
    assert ("update_reservation_users", name, tuple(sorted(("root", user)))) in adapter.calls
    # a shorter list the in-place update ignores: the reservation is made again
    _, _, rec3 = _env(tmp_path, adapter=adapter, clock=clock, exclude_users=("root",))
    rec3.cycle()
    assert adapter.reservations[name] == CloudReservation(("cloud1", "cloud2", "cloud3", "cloud4"), ("root",))


def test_with_slurmdbd_the_reservation_allows_only_funded_accounts_and_follows_the_money(tmp_path):
    from burstd.domain.partition_access import CloudReservation

    clock, adapter, rec = _env(tmp_path, exclude_users=())
    adapter.slurmdbd_associations = {("alice", "funded"), ("alice", "broke"), ("alice", "excl"), ("", "physics")}
    rec.cycle()
    name = "burstd_" + rec.config.cluster.id
    nodes = ("cloud1", "cloud2", "cloud3", "cloud4")
    # physics has no budget (and no default_account_usd), broke $0, excl excluded: only funded may burst
    assert adapter.reservations == {name: CloudReservation(nodes, (), ("funded",))}

    def again(**budget):
        _, _, r = _env(tmp_path, adapter=adapter, clock=clock, exclude_users=(), **budget)
        r.cycle()
        return adapter.reservations[name]

    # no account has money: the list would be empty, so the reservation lets no account's job in (root only)
    assert again(accounts={"funded": 0, "broke": 0}) == CloudReservation(nodes, (), ())
    # money again (physics by default_account_usd): a new reservation, since root-only names a user
    assert again(accounts={"funded": 5, "broke": 0}, default_account_usd=1) == CloudReservation(
        nodes, (), ("funded", "physics"))
    creates = len([c for c in adapter.calls if c[0] == "set_cloud_reservation"])
    # physics back to $0: the account list changes in place (jobs may run in the reservation; Slurm takes it)
    assert again(accounts={"funded": 5, "broke": 0, "physics": 0}, default_account_usd=1) == CloudReservation(
        nodes, (), ("funded",))
    assert adapter.calls[-1] == ("update_reservation_accounts", name, ("funded",))
    assert len([c for c in adapter.calls if c[0] == "set_cloud_reservation"]) == creates


def test_a_slurmdbd_that_cannot_be_read_never_widens_the_reservation(tmp_path):
    from burstd.domain.partition_access import CloudReservation

    clock, adapter, rec = _env(tmp_path, exclude_users=())

    def down():
        raise RuntimeError("slurmdbd: connection refused")

    adapter.associations = down
    rec.cycle()
    assert adapter.reservations == {}  # never read: nothing written (and the cycle reports why)
    assert not [c for c in adapter.calls if c[0] == "set_cloud_reservation"]
