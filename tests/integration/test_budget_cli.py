"""Budgets, spend and bad input through the real burstctl, against the daemon's real API over its socket and a
real SQLite Store. Slurm and the cloud are the only fakes here (the edges this file does not test; the bed test
``test_budget_bed.py`` runs the same paths against real Slurm and network-namespace VMs).

Bad input gets a clear error and changes nothing: a negative / NaN / sub-micro-dollar budget, a trace with a
garbage line, a config price of NaN, a price source that says NaN (no launch). An account slurmdbd does not know
is refused; without slurmdbd, an unknown account is accepted with a warning naming the accounts burstd has seen
(see burstd/daemon/budgets.py).
"""

from __future__ import annotations

import json
import math
import time

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.domain.budget import PriceQuote
from burstd.domain.lease import LeaseState
from burstd.domain.money import format_usd
from burstd.domain.slurm import Job
from burstd.domain.ledger import lease_cost
from tests.integration.live_api import POOL_TOML, live_api

@pytest.fixture
def live(tmp_path):
    with live_api(tmp_path) as parts:
        yield parts


class Result:
    def __init__(self, r):
        self.exit_code = r.exit_code
        self.output = " ".join(r.output.split())  # rich wraps long lines at the terminal width
        self.cells = " ".join(r.output.translate({ord(c): " " for c in "│┃"}).split())  # table rows as words


def cli(*args: str) -> Result:
    return Result(CliRunner().invoke(app, list(args)))


def limits(store) -> dict[str, int]:
    return {b.account: b.limit_micros for b in store.budgets()}


# --- budgets --------------------------------------------------------------------------------------------
def test_budget_set_and_show(live):
    path, rec, store, *_ = live
    r = cli("budget", "set", "chem", "250.5", "-c", path)
    assert r.exit_code == 0, r.output
    assert limits(store) == {"chem": 250_500_000}
    shown = json.loads(cli("budget", "show", "--json", "-c", path).output)
    assert shown["accounts"]["chem"]["limit_micro_usd"] == 250_500_000
    assert shown["accounts"]["chem"]["source"] == "set" and shown["accounts"]["bio"]["source"] == "config"


@pytest.mark.parametrize("bad, what", [
    ("-5", "finite amount >= 0"),
    ("nan", "finite amount >= 0"),
    ("inf", "finite amount >= 0"),
    ("lots", "not an amount in USD"),
    ("0.0000001", "more precision than a micro-dollar"),  # passes the CLI, refused by the daemon (422)
])
def test_bad_budget_is_refused_and_changes_nothing(live, bad, what):
    path, rec, store, *_ = live
    assert cli("budget", "set", "chem", "12", "-c", path).exit_code == 0
    before = limits(store)
    r = cli("budget", "set", "chem", bad, "-c", path)
    assert r.exit_code != 0, r.output
    assert what in r.output and "chem" in r.output, r.output
    assert limits(store) == before == {"chem": 12_000_000}


def test_negative_budget_through_the_api_is_a_422_naming_the_account(live):
    from burstd.daemon.client import ApiClient, ApiError

    path, rec, store, *_ = live
    with ApiClient(rec.config.api.socket) as api, pytest.raises(ApiError) as err:
        api.put("/v1/budgets/chem", json={"usd": -5})
    assert err.value.status == 422 and "account chem" in str(err.value) and "negative" in str(err.value)
    assert limits(store) == {}


def test_unknown_account_is_stored_with_a_warning_naming_known_accounts(live):
    path, rec, store, adapter, *_ = live
    adapter.jobs = [Job(1, "j", "ann", "bio", ("onprem",), "PENDING")]
    rec.cycle()  # the daemon has seen account bio in Slurm's queue
    r = cli("budget", "set", "chme", "5", "-c", path)
    assert r.exit_code == 0, r.output
    assert "warning" in r.output and "'chme'" in r.output and "bio" in r.output and "chem" in r.output, r.output
    assert limits(store) == {"chme": 5_000_000}
    r = cli("budget", "set", "bio", "5", "-c", path)  # seen in the queue: no warning
    assert r.exit_code == 0 and "warning" not in r.output, r.output


def test_an_account_slurmdbd_does_not_know_is_refused_and_nothing_is_stored(live):
    path, rec, store, adapter, *_ = live
    adapter.slurmdbd_accounts = {"chem", "bio", "root"}
    r = cli("budget", "set", "chme", "5", "-c", path)
    assert r.exit_code != 0, r.output
    assert "'chme' is not known to Slurm's accounting" in r.output and "sacctmgr add account chme" in r.output, \
        r.output
    assert "bio, chem" in r.output and limits(store) == {}
    r = cli("budget", "set", "chem", "5", "-c", path)  # slurmdbd knows it: stored, no warning
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    assert limits(store) == {"chem": 5_000_000}


def test_an_account_submitted_since_the_last_cycle_is_not_called_unknown(live):
    path, rec, store, adapter, *_ = live
    rec.cycle()
    adapter.jobs = [Job(2, "j", "ann", "phys", ("onprem",), "PENDING")]  # sbatch after that cycle
    r = cli("budget", "set", "phys", "5", "-c", path)
    assert r.exit_code == 0 and "warning" not in r.output, r.output


def test_jobs_without_an_account_get_a_budget_from_the_cli_and_then_burst(live):
    path, rec, store, adapter, *_ = live
    adapter.jobs = [Job(3, "j", "ann", "", ("batch",), "PENDING", reason="Resources",
                        time_limit_min=60, cpus=2, submit_time=int(rec.clock()) - 7200)]
    rec.cycle()
    why = rec.last_decisions.explanations[3].reason
    assert "burstctl budget set --no-account USD" in why and "budget.default_account_usd" in why, why
    r = cli("budget", "set", "--no-account", "20", "-c", path)
    assert r.exit_code == 0 and "jobs without an account: $20.00" in r.output, r.output
    assert limits(store) == {"(none)": 20_000_000}
    rec.cycle()
    assert "no budget" not in rec.last_decisions.explanations[3].reason, rec.last_decisions.explanations[3]
    shown = json.loads(cli("budget", "show", "--json", "-c", path).output)
    assert shown["accounts"]["(none)"]["limit_micro_usd"] == 20_000_000
    r = cli("budget", "set", "(none)x", "5", "-c", path)  # a bad name says how to fund account-less jobs
    assert r.exit_code == 2 and "--no-account" in r.output, r.output


# --- spend and its plot -----------------------------------------------------------------------------------
def _burst_two_accounts(rec, store, adapter, clock):
    """Two leases launched through the daemon's cycle, jobs of chem and bio on them, then closed."""
    made = []
    adapter.jobs = [Job(11, "j", "ann", "chem", ("onprem", "cloud"), "PENDING", time_limit_min=60),
                    Job(12, "j", "ann", "bio", ("onprem", "cloud"), "PENDING", time_limit_min=60)]
    rec.cycle()  # the daemon sees the jobs (and their accounts) before Slurm resumes nodes for them
    for node, job, acct in (("cloud1", 11, "chem"), ("cloud2", 12, "bio")):
        rec.intake.request_resume([node], {node: (job,)})
        rec.cycle()
        lease = store.lease_for_node(node)
        assert lease is not None and lease.launched_at is not None, lease
        made.append((lease, job, acct))
    clock.advance(600)
    adapter.jobs = [Job(j, "j", "ann", a, ("cloud",), "RUNNING", nodes=l.node_name, start_time=int(clock()),
                        cpus=2) for l, j, a in made]
    rec.cycle()
    clock.advance(1800)
    adapter.jobs = []
    rec.cycle()
    clock.advance(300)
    for lease, _, _ in made:  # an admin terminates them: the daemon's own path to TERMINATED
        rec.intake.add_intent("terminate", [lease.node_name], "test is done")
    for _ in range(3):
        rec.cycle()
        clock.advance(5)
    rec.cycle()
    return [store.lease(lease.lease_id) for lease, _, _ in made]


def test_spend_attributed_plus_overhead_equals_lease_cost_and_plot(live, tmp_path):
    path, rec, store, adapter, provider, clock = live
    closed = _burst_two_accounts(rec, store, adapter, clock)
    assert all(x.state == LeaseState.TERMINATED and x.accrued_until == x.ended_at for x in closed), closed
    cost = sum(lease_cost(x, x.ended_at, store.price_points(x.lease_id)) for x in closed)
    assert cost > 0
    def spend(*args: str) -> dict[str, int]:
        data = json.loads(cli("spend", *args, "--json", "-c", path).output)
        rows = {r["key"]: r["spend_micro_usd"] for r in data["rows"]}
        assert data["total_micro_usd"] == sum(rows.values()), data
        return rows

    by_job, by_acct = spend("--by", "job"), spend("--by", "account")
    assert sum(by_job.values()) == cost == sum(by_acct.values()), (by_job, by_acct, cost)
    # --since takes dates (the README's example), ages and Unix times, through the one parser
    day = time.strftime("%Y-%m-%d", time.gmtime(closed[0].launched_at))
    assert spend("--since", day) == by_acct
    assert spend("--since", str(closed[0].ended_at + 1)) == {}
    assert spend("--since", day, "--until", str(closed[0].launched_at - 1)) == {}
    r = cli("spend", "--since", "last tuesday", "-c", path)
    assert r.exit_code == 2 and "--since 'last tuesday'" in r.output, r.output
    # the table uses the one money rule: the same amount as budget show, rounded half-up to the cent
    table = cli("spend", "-c", path).cells
    assert f"chem {format_usd(by_acct['chem'])}" in table and f"total {format_usd(cost)}" in table, table
    shown = cli("budget", "show", "-c", path).cells
    assert f"chem $10.00 {format_usd(by_acct['chem'])}" in shown, shown
    assert by_job["11"] > 0 and by_job["12"] > 0 and by_job["(overhead)"] > 0, by_job
    # 30 min of a $3.60/h node per job, split exactly (the jobs held the whole node)
    assert by_job["11"] == by_job["12"] == 1_800_000, by_job
    [alloc] = store.allocations(closed[0].lease_id)  # recorded from the snapshots, end = first snapshot without it
    assert (alloc.job_id, alloc.account, alloc.user, alloc.weight, alloc.end - alloc.start) == (11, "chem", "ann", 2, 1800)

    for name in ("spend.png", "spend.html"):
        out = tmp_path / name
        r = cli("spend", "--by", "account", "--plot", str(out), "-c", path)
        assert r.exit_code == 0, r.output
        assert out.stat().st_size > 1000
    assert (tmp_path / "spend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "spend.html").read_text()
    assert "<td>chem</td>" in page and "<td>bio</td>" in page and "data:image/png;base64," in page
    r = cli("spend", "--plot", str(tmp_path / "spend.pdf"), "-c", path)
    assert r.exit_code == 2 and ".png or .html" in r.output
    assert not (tmp_path / "spend.pdf").exists()


def _money_keys_without_unit(data, path="") -> list[str]:
    """Keys of numbers that hold money (by their name) but do not say the unit."""
    bad = []
    if isinstance(data, dict):
        for k, v in data.items():
            money = any(w in str(k) for w in ("price", "cost", "spend", "spent", "limit", "usd", "budget", "burn"))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and money and "_micro_usd" not in str(k):
                bad.append(f"{path}.{k}")
            bad += _money_keys_without_unit(v, f"{path}.{k}")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            bad += _money_keys_without_unit(v, f"{path}[{i}]")
    return bad


def test_every_json_money_field_names_its_unit(live):
    path, rec, store, adapter, provider, clock = live
    _burst_two_accounts(rec, store, adapter, clock)
    for args in (("status",), ("leases", "--all"), ("budget", "show"), ("spend",), ("spend", "--by", "job"),
                 ("events",)):
        data = json.loads(cli(*args, "--json", "-c", path).output)
        assert _money_keys_without_unit(data) == [], (args, _money_keys_without_unit(data))
    assert json.loads(cli("spend", "--json", "-c", path).output)["total_micro_usd"] > 0


# --- ids, tables and the pause reason ---------------------------------------------------------------------
def test_lease_ids_are_taken_by_unique_prefix_and_shown_as_one_at_80_columns(live):
    from burstd.cli import common

    path, rec, store, *_ = live
    a = store.create_lease(pool="local", node_name="cloud1", lease_id="3f2a" + "0" * 28, reason="test")
    store.create_lease(pool="local", node_name="cloud2", lease_id="3f2b" + "1" * 28, reason="test")
    r = cli("events", "--lease", "3f2a", "--json", "-c", path)
    assert r.exit_code == 0 and {e["lease_id"] for e in json.loads(r.output)} == {a.lease_id}, r.output
    r = cli("events", "--lease", "3f2", "-c", path)
    assert r.exit_code == 2 and "ambiguous" in r.output and a.lease_id in r.output, r.output
    r = cli("events", "--lease", "ffff", "-c", path)
    assert r.exit_code == 2 and "no lease id starts with 'ffff'" in r.output, r.output
    r = cli("drain", "3f2", "-c", path)  # drain/terminate take a node, or a lease/instance id prefix
    assert r.exit_code == 2 and "ambiguous" in r.output, r.output
    r = cli("preempt", "3f2a", "-c", path)  # so does preempt: 3f2a is cloud1's lease (its VM is not running here)
    assert r.exit_code == 1 and "node cloud1 has no running VM" in r.output, r.output
    r = cli("preempt", "3f2", "-c", path)
    assert r.exit_code == 2 and "ambiguous" in r.output, r.output
    width = common.console.width
    common.console.width = 80
    try:
        raw = CliRunner().invoke(app, ["leases", "-c", path]).output
        wide = CliRunner().invoke(app, ["leases", "--wide", "-c", path]).output
    finally:
        common.console.width = width
    # at 80 columns an id is its unique prefix (never cut with an ellipsis), which every command takes
    assert max(len(line) for line in raw.splitlines()) <= 80, raw
    assert "3f2a0000 " in raw and a.lease_id not in raw and "unique prefixes" in raw, raw
    assert cli("events", "--lease", "3f2a0000", "-c", path).exit_code == 0
    assert a.lease_id in wide, wide


def test_status_shows_why_bursting_is_paused(live):
    path, rec, *_ = live
    rec.cycle()
    assert cli("pause", "--reason", "quota review until Monday", "-c", path).exit_code == 0
    out = cli("status", "-c", path).output
    assert "PAUSED" in out and "quota review until Monday" in out, out
    data = json.loads(cli("status", "--json", "-c", path).output)
    assert data["paused"] and data["pause"]["reason"] == "quota review until Monday", data


# --- prices -------------------------------------------------------------------------------------------------
def test_spend_reconcile_agrees_with_sacct_and_reports_every_difference(live):
    from burstd.domain.sacct import SacctJob

    path, rec, store, adapter, provider, clock = live
    _burst_two_accounts(rec, store, adapter, clock)
    r = cli("spend", "--reconcile", "-c", path)
    assert r.exit_code != 0 and "no slurmdbd" in r.output, r.output  # nothing to reconcile against

    def rec_(job, account, node):
        return SacctJob(job, account, "ann", (node,), "COMPLETED", clock() - 2000, clock() - 300)

    adapter.sacct = [rec_(11, "chem", "cloud1"), rec_(12, "bio", "cloud2")]
    r = cli("spend", "--reconcile", "--json", "-c", path)
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["ok"] and data["agree"] == [11, 12] and data["agreed_micro_usd"] > 0
    # a job slurmdbd saw on a cloud node that burstd never charged, and one charged to another account
    adapter.sacct = [rec_(11, "chem", "cloud1"), rec_(12, "physics", "cloud2"), rec_(13, "bio", "cloud3")]
    r = cli("spend", "--reconcile", "-c", path)
    assert r.exit_code == 1, r.output
    assert "burstd charged nothing" in r.output and "other account" in r.output and "13" in r.output, r.output


def test_price_source_returning_nan_refuses_the_launch(live, caplog):
    path, rec, store, adapter, provider, clock = live
    rec.price_source = lambda cfg: {("local", "spot"): PriceQuote("local", "spot", math.nan)}
    rec.intake.request_resume(["cloud3"], {"cloud3": (21,)})
    adapter.jobs = [Job(21, "j", "ann", "chem", ("onprem",), "PENDING")]
    rec.cycle()
    lease = store.leases()[0]
    assert lease.state == LeaseState.REFUSED and "no valid price for pool local" in lease.reason, lease
    assert provider.launch_calls == []
    assert any("price" in r.getMessage() or "decide failed" in r.getMessage() for r in caplog.records)


def test_config_price_nan_is_a_config_error_naming_the_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(POOL_TOML.replace("price_per_hour = 3.6", "price_per_hour = nan"))
    r = cli("config", "check", str(bad))
    assert r.exit_code == 2
    assert "pools[0].price_per_hour" in r.output and str(bad) in r.output, r.output


# --- traces ----------------------------------------------------------------------------------------------
def test_simulate_trace_with_a_garbage_line_names_the_line(tmp_path):
    good = "1 0 0 100 8 -1 -1 8 200 -1 1 3 2 -1 1 -1 -1 -1\n2 10 0 50 16 -1 -1 16 50 -1 1 4 4 -1 1 -1 -1 -1\n"
    trace = tmp_path / "bad.swf"
    trace.write_text("; MaxProcs: 64\n" + good + "this is not an swf line\n")
    r = cli("simulate", "--trace", str(trace), "--onprem-cpus", "32", "--json")
    assert r.exit_code != 0
    assert "bad.swf:4" in r.output, r.output
