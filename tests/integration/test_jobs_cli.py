"""``burstctl jobs`` and ``explain`` for a job that left the queue (issue 26), against a real control API and
SQLite Store: the story comes from burstd's records (lease, allocations, spend ledger, events)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli import common
from burstd.cli.app import app
from burstd.domain.budget import Allocation, SpendInterval
from tests.integration.live_api import live_api

T = 1_773_144_000.0


@pytest.fixture
def live(tmp_path):
    with live_api(tmp_path) as parts:
        yield parts


def cli(*args):
    return CliRunner().invoke(app, list(args))


def _preempted_then_finished(store):
    """Job 42 ran on cloud1 (spot), was preempted and requeued, then finished on cloud2; job 43 still runs."""
    def lease(lid, node, job, account, user, start):
        store.create_lease(pool="local", node_name=node, lease_id=lid, job_ids=[job], account=account, at=start)
        for st in ("LAUNCHING", "BOOTING", "READY"):
            store.transition(lid, st, at=start + 10, **({"instance_id": f"i-{lid}"} if st == "BOOTING" else {}))
        store.record_allocations(lid, [Allocation(job, start + 60, None, account, user)])

    lease("a" * 32, "cloud1", 42, "chem", "alice", T)
    store.add_spend([SpendInterval("a" * 32, "local", "chem", T + 60, T + 660, 3_600_000, 600_000, 42, "alice")])
    store.transition("a" * 32, "FAILED", "preempted: the provider reclaimed the instance", at=T + 700,
                     extra={"requeue": [42]})
    store.transition("a" * 32, "TERMINATING", "preempted", at=T + 701)
    store.transition("a" * 32, "TERMINATED", "gone", at=T + 760, ended_at=T + 760)
    lease("b" * 32, "cloud2", 42, "chem", "alice", T + 800)
    store.add_spend([SpendInterval("b" * 32, "local", "chem", T + 860, T + 1860, 3_600_000, 1_000_000, 42, "alice")])
    store.close_allocations("b" * 32, T + 1860)
    store.transition("b" * 32, "TERMINATING", "idle", at=T + 2000)
    store.transition("b" * 32, "TERMINATED", "gone", at=T + 2060, ended_at=T + 2060)
    lease("c" * 32, "cloud3", 43, "bio", "bob", T + 1500)


def test_jobs_lists_where_each_ran_and_what_it_cost(live, monkeypatch):
    path, rec, store, *_ = live
    _preempted_then_finished(store)
    r = cli("jobs", "--json", "-c", path)
    assert r.exit_code == 0, r.output
    rows = {x["job_id"]: x for x in json.loads(r.stdout)}
    assert set(rows) == {42, 43}
    j = rows[42]
    assert (j["state"], j["nodes"], j["preemptions"], j["requeues"], j["cost_micro_usd"]) == (
        "ended", ["cloud1", "cloud2"], 1, 1, 1_600_000)
    assert rows[43]["state"] == "running"
    assert [x["job_id"] for x in json.loads(cli("jobs", "--account", "chem", "--json", "-c", path).stdout)] == [42]
    assert [x["job_id"] for x in json.loads(cli("jobs", "--user", "bob", "--state", "running", "--json", "-c",
                                                path).stdout)] == [43]
    r = cli("jobs", "--state", "done", "-c", path)
    assert r.exit_code == 2 and "--state 'done'" in r.output
    monkeypatch.setattr(common.console, "_width", 80)
    r = cli("jobs", "-c", path)
    assert r.exit_code == 0 and max(len(x) for x in r.output.splitlines()) <= 80, r.output
    assert "cloud1,cloud2" in r.output and "$1.60" in r.output


def test_explain_tells_a_finished_jobs_story(live):
    path, rec, store, *_ = live
    rec.cycle()  # a snapshot: neither job is in Slurm's queue any more
    _preempted_then_finished(store)
    r = cli("explain", "42", "-c", path)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == ("job 42 (chem/alice): ran on cloud1 (local, spot), then cloud2 (local, spot), "
                                "preempted once, requeued once, cost $1.60; Slurm's accounting: no slurmdbd to ask "
                                "(AccountingStorageType is not slurmdbd, or slurm.backend is not cli): outcome unknown")
    data = json.loads(cli("explain", "42", "--json", "-c", path).stdout)
    assert data["found"] is False and data["history"]["preemptions"] == 1
    assert "not in the queue" in cli("explain", "99", "-c", path).output  # no record of it either
