"""The one rule of who may use cloud nodes (``burstd.policy.eligibility``): decide()'s hard gates and pool fit
and the daemon's launch guard read the same verdicts; slurmdbd's associations decide whose budget a job spends."""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.policy.eligibility import Associations, Eligibility, association_refusal

CFG = parse_config({
    "pools": [{"name": "gpu", "provider": "local", "partition": "cloud-gpu", "node_prefix": "g", "node_count": 2,
               "accounts": ["chem"], "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
               "price_per_hour": 1.0},
              {"name": "cpu", "provider": "local", "partition": "cloud", "node_prefix": "c", "node_count": 2,
               "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}],
    "policy": {"onprem_partitions": ["onprem"], "exclude_accounts": ["excl"], "exclude_users": ["mallory"],
               "exclude_qos": ["nocloud"]},
})
ELIG = Eligibility.of(CFG)


@pytest.mark.parametrize("pool, account, user, qos, why", [
    ("cpu", "chem", "alice", "normal", None),
    ("cpu", "excl", "alice", "normal", "account excl is excluded"),
    ("cpu", "chem", "mallory", "normal", "user mallory is excluded"),
    ("cpu", "chem", "alice", "nocloud", "QOS nocloud is excluded"),
    ("gpu", "chem", "alice", "", None),
    ("gpu", "bio", "alice", "", "account bio may not use pool gpu"),
    ("gpu", "", "alice", "", "account (none) may not use pool gpu"),
    ("gpu", "excl", "alice", "", "account excl is excluded"),  # the exclusion is named first
])
def test_one_sentence_per_job_and_pool(pool, account, user, qos, why):
    assert ELIG.refusal(pool, account, user, qos) == why


def test_decide_explains_a_gated_job_with_the_same_sentence_the_guard_refuses_with():
    from burstd.domain.slurm import Job, Snapshot
    from burstd.policy.decide import decide

    job = Job(1, "j", "alice", "excl", ("onprem",), "PENDING", reason="Resources", time_limit_min=10, submit_time=0)
    out = decide(Snapshot(taken_at=10_000.0, jobs=(job,)), [], None, {}, CFG, 10_000.0, explain=True)
    assert not out.eligible
    assert "account excl is excluded" in str(out.explanations[1])
    assert ELIG.refusal("cpu", "excl", "alice", "") == "account excl is excluded"


ASSOC = Associations(frozenset({"chem", "bio"}), frozenset({("alice", "chem")}))


@pytest.mark.parametrize("user, account, assoc, refused", [
    ("alice", "chem", ASSOC, None),
    ("bob", "chem", ASSOC, "no association"),  # -A chem typed by a user slurmdbd does not associate with it
    ("alice", "bio", ASSOC, "no association"),
    ("alice", "made-up", ASSOC, "not known to Slurm's accounting"),  # never the default budget
    ("alice", "", ASSOC, None),  # no account: the "(none)" budget, whatever slurmdbd says
    ("bob", "made-up", None, None),  # no slurmdbd: nothing to ask (the daemon warns at start)
    ("", "chem", ASSOC, None),  # a lease whose jobs are unknown: the account alone is checked
    ("", "x\nevil", ASSOC, "'x\\nevil'"),  # user text is escaped in the sentence
])
def test_associations_decide_whose_budget_a_job_may_spend(user, account, assoc, refused):
    why = association_refusal(user, account, assoc)
    assert (why is None) if refused is None else (why is not None and refused in why)
