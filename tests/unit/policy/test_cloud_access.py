"""The rule held on cloud nodes already up (issue 21 item 1), pure: which accounts a cloud partition denies, and
which queued or running jobs burstd moves, holds, requeues or releases."""

from __future__ import annotations

import pytest

from burstd.domain.partition_access import PartitionAccess, is_slurm_name
from burstd.domain.slurm import Job, Snapshot
from burstd.policy.cloud_access import (hold_comment, partition_accounts, plan_gate, reservation_accounts,
                                        unfunded_accounts)
from burstd.policy.eligibility import Eligibility
from tests.unit.policy.policy_factories import NOW, book, config, pool

POOLS = {"cloud": "aws-cpu"}


def elig(**policy) -> Eligibility:
    return Eligibility.of(config(policy=policy))


def job(jid: int, user: str = "alice", account: str = "chem", partitions=("cloud",), state: str = "PENDING",
        hold: bool = False) -> Job:
    return Job(jid, "j", user, account, tuple(partitions), state, hold=hold)


def rule(eligibility: Eligibility):
    return lambda pool, j: eligibility.refusal(pool, j.account, j.user, j.qos)


# --- money ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accounts, spent, site, expected", [
    ({"chem": 10.0, "broke": 0.0}, {}, None, {"broke", "nobudget"}),  # $0, and no budget at all (no default)
    ({"chem": 10.0, "broke": 1.0}, {"chem": 10.0}, None, {"chem", "nobudget"}),  # spent to the cent
    ({"chem": 10.0, "broke": 1.0}, {"chem": 9.99}, None, {"nobudget"}),  # a cent left: a cheap job may fit
    ({"chem": 10.0, "broke": 1.0}, {}, 0.0, {"chem", "broke", "nobudget"}),  # the site's budget is spent
])
def test_unfunded_accounts_are_those_with_nothing_left(accounts, spent, site, expected):
    b = book(accounts, site=site, spent=spent)
    assert unfunded_accounts(b, config(), ["chem", "broke", "nobudget", ""]) & {"chem", "broke", "nobudget"} \
        == expected


def test_a_default_budget_funds_unlisted_accounts():
    assert unfunded_accounts(book({}), config(budget={"default_account_usd": 5}), ["new"]) == frozenset()


# --- the partition's accounts --------------------------------------------------------------------------------
def test_refused_and_unfunded_accounts_are_denied_on_top_of_the_admins_own():
    got = partition_accounts(PartitionAccess(deny=("legacy",)), elig(exclude_accounts=["physics"]), "aws-cpu",
                             {"broke"})
    assert got == PartitionAccess(deny=("broke", "legacy", "physics"))


def test_nothing_refused_leaves_the_partition_as_the_admin_wrote_it():
    assert partition_accounts(PartitionAccess(), elig(), "aws-cpu", ()) == PartitionAccess()
    assert partition_accounts(PartitionAccess(deny=("x",)), elig(), "aws-cpu", ()) == PartitionAccess(deny=("x",))


def test_an_allow_list_loses_refused_accounts_and_keeps_its_order():
    cfg = config(pools=[pool(accounts=["chem", "bio", "broke"])])
    got = partition_accounts(PartitionAccess(allow=("chem", "bio", "broke")), Eligibility.of(cfg), "aws-cpu",
                             {"broke"})
    assert got == PartitionAccess(allow=("chem", "bio"))


def test_pool_accounts_narrow_the_admins_allow_list():
    cfg = config(pools=[pool(accounts=["chem"])])
    assert partition_accounts(PartitionAccess(allow=("chem", "bio")), Eligibility.of(cfg), "aws-cpu", ()) \
        == PartitionAccess(allow=("chem",))
    assert partition_accounts(PartitionAccess(), Eligibility.of(cfg), "aws-cpu", ()) == PartitionAccess(allow=("chem",))


def test_an_allow_list_with_nobody_left_denies_everyone_it_named_never_allows_all():
    cfg = config(pools=[pool(accounts=["broke"])])
    got = partition_accounts(PartitionAccess(), Eligibility.of(cfg), "aws-cpu", {"broke", "other"})
    assert got.allow is None and set(got.deny or ()) == {"broke", "other"}


@pytest.mark.parametrize("name", ["a,b", "a=b", "a b", "x\nDenyAccounts=", "", "ALL", "all", "a;b", "é"])
def test_a_name_that_could_carry_a_setting_never_reaches_the_partition(name):
    assert not is_slurm_name(name)
    got = partition_accounts(PartitionAccess(), elig(exclude_accounts=[name] if name.strip() else []), "aws-cpu",
                             {name})
    assert name not in (got.deny or ()) and name not in (got.allow or ())


# --- the queue -----------------------------------------------------------------------------------------------
def snap(*jobs: Job) -> Snapshot:
    return Snapshot(taken_at=NOW, jobs=jobs)


def test_an_excluded_users_cloud_only_job_is_held_with_the_reason():
    edits = plan_gate(snap(job(1, user="mallory"), job(2)), POOLS, rule(elig(exclude_users=["mallory"])), (), ())
    assert edits.hold == ((1, "user mallory is excluded"),)
    assert not edits.remove and not edits.requeue_hold and not edits.release


def test_a_refused_job_with_an_onprem_partition_only_loses_the_cloud():
    edits = plan_gate(snap(job(1, user="mallory", partitions=("batch", "cloud"))), POOLS,
                      rule(elig(exclude_users=["mallory"])), (), ())
    assert edits.remove == ((1, "cloud"),) and not edits.hold


def test_an_unfunded_accounts_job_is_held_or_sent_home_as_slurm_may_not_enforce_denyaccounts():
    edits = plan_gate(snap(job(1, account="broke"), job(3, account="broke", partitions=("batch", "cloud"))),
                      POOLS, rule(elig()), {"broke"}, ())
    assert edits.hold == ((1, "account broke has no cloud budget left"),)
    assert edits.remove == ((3, "cloud"),)


def test_burstd_releases_only_its_own_holds_once_the_rule_allows():
    jobs = snap(job(1, hold=True), job(2, hold=True), job(3, user="mallory", hold=True))
    edits = plan_gate(jobs, POOLS, rule(elig(exclude_users=["mallory"])), (), held_by_burstd={1, 3, 9})
    assert edits.release == (1,)  # 2 is someone else's hold; 3 is still refused
    assert edits.forget == (9,)  # left the queue
    assert not edits.hold  # 3 is held already


def test_a_job_of_ours_that_left_the_cloud_partitions_is_released():
    edits = plan_gate(snap(job(1, user="mallory", partitions=("batch",), hold=True)), POOLS,
                      rule(elig(exclude_users=["mallory"])), (), held_by_burstd={1})
    assert edits.release == (1,)


def test_a_refused_job_running_on_a_cloud_node_is_requeued_and_held_but_money_never_stops_a_running_job():
    jobs = snap(job(1, user="mallory", state="RUNNING"), job(2, account="broke", state="RUNNING"),
                job(3, user="mallory", partitions=("batch",), state="RUNNING"))
    edits = plan_gate(jobs, POOLS, rule(elig(exclude_users=["mallory"])), {"broke"}, ())
    assert edits.requeue_hold == ((1, "user mallory is excluded"),)


def test_the_hold_comment_is_one_bounded_line_of_plain_words():
    text = hold_comment("user x\ny=z;$(rm -rf /)`id` is excluded" + "a" * 400)
    assert text.startswith("burstd-hold: ") and "\n" not in text and "`" not in text and "=" not in text
    assert len(text) <= 250


def test_a_hold_of_ours_someone_released_while_the_rule_still_refuses_is_put_back():
    edits = plan_gate(snap(job(1, user="mallory", hold=False)), POOLS, rule(elig(exclude_users=["mallory"])), (),
                      held_by_burstd={1})
    assert edits.hold == ((1, "user mallory is excluded"),) and not edits.release


# --- the reservation's account list (every release, enforced associations or not) -------------------------------
def test_the_reservation_allows_the_funded_accounts_slurmdbd_knows_and_no_other():
    e = Eligibility.of(config(pools=[pool("a", partition="ca", prefix="a"),
                                     pool("b", partition="cb", prefix="b", accounts=["physics"])],
                              policy={"exclude_accounts": ["excl"]}))
    known = {"chem", "physics", "excl", "broke", "with space", "", "ALL"}
    assert reservation_accounts(e, ["a", "b"], {"broke"}, known) == ("chem", "physics")
    # an account only a restricted pool would take, and that pool restricts to another: on no cloud node
    assert reservation_accounts(e, ["b"], (), known) == ("physics",)
    # nobody funded: an empty list (the root-only reservation), never "no list"
    assert reservation_accounts(e, ["a"], {"chem", "physics", "broke"}, known) == ()


def test_without_slurmdbd_the_reservation_names_no_account():
    # Slurm refuses a reservation naming an account it does not know: with no slurmdbd there is no list to write
    assert reservation_accounts(elig(), ["aws-cpu"], (), None) is None
