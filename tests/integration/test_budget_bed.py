"""Budgets end to end on the live bed, with the full policy (``burstd.policy.decide``):

two accounts overload on-prem with sbatch jobs as a normal user; ``funded`` (budget left) bursts and runs on cloud
nodes, ``broke`` (budget $0) stays pending on-prem and ``burstctl explain`` says why (its account and budget);
``burstctl budget set broke 1`` lets it burst in the next cycles and run on cloud nodes. Then
``burstctl spend --json`` shows both accounts' spend, the spend ledger adds up exactly to what the leases cost,
every lease is TERMINATED and every cloud node powered down.

Real parts only: Slurm (the bed: 22.05, or 24.11 / 26.05 from chroots) with slurmdbd, calling burstd's hooks, the burstd daemon process, SQLite, the local
provider's network-namespace VMs running a real slurmd, burstctl as a subprocess talking to the daemon's socket.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from burstd.config import load_config
from burstd.db.store import Store
from burstd.domain.ledger import lease_cost
from tests.integration.daemon_bed import (
    bed_daemon_config, cloud_namespaces, fill_onprem, leases, running_daemon, wait_for,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]
BAD = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def burstctl(cfg_path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "burstd.cli.app", *args, "--config", str(cfg_path)],
                          capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc


def test_funded_account_bursts_broke_account_waits_until_its_budget_is_raised(slurm_bed, bed_user, tmp_path):
    cfg_path = bed_daemon_config(
        slurm_bed, tmp_path / "burstd",
        budget={"default_account_usd": 0, "accounts": {"funded": 10, "broke": 0}},
    )
    cfg = load_config(cfg_path)
    prefix = cfg.pools[0].node_prefix
    onprem = slurm_bed.onprem_partition
    started = time.time()
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:
        status = json.loads(burstctl(cfg_path, "status", "--json").stdout)
        assert status["decider"] == "policy", status

        def submit(account: str, seconds: int) -> int:
            return slurm_bed.sbatch(["-p", onprem, f"--account={account}", "-N", "1", "-n", "2", "-t", "5",
                                     "-o", "out-%j.txt"], f"#!/bin/sh\nhostname\nsleep {seconds}\n", user=bed_user)

        # blockers fill both on-prem nodes for the whole test (cancelled at the end)
        blockers = fill_onprem(slurm_bed, "#!/bin/sh\nsleep 900\n", bed_user,
                               ["--account=funded", "-t", "20", "-o", "/dev/null"])
        funded = [submit("funded", 8) for _ in range(2)]
        broke = [submit("broke", 8) for _ in range(2)]
        workdir = slurm_bed.workdir(bed_user)

        def finished(jobs):
            def check():
                states = {j: slurm_bed.job(j).get("JobState") for j in jobs}
                assert not BAD & set(states.values()), (states, daemon.log_tail())
                return all(s == "COMPLETED" for s in states.values()) and states
            return check

        def host(j: int) -> str:
            return (workdir / f"out-{j}.txt").read_text().split()[0]

        wait_for(finished(funded), 240, "the funded jobs to complete")
        assert all(host(j).startswith(prefix) and host(j) in slurm_bed.cloud_nodes for j in funded), \
            {j: host(j) for j in funded}

        # the broke account's jobs are still pending on-prem, never made burst-eligible
        for j in broke:
            info = slurm_bed.job(j)
            assert info.get("JobState") == "PENDING", info
            assert slurm_bed.cloud_partition not in info.get("Partition", "").split(","), info
            why = json.loads(burstctl(cfg_path, "explain", str(j), "--json").stdout)
            assert why["burst"] is False, why
            # the reason names the account and what its budget leaves: "account broke has $0.00 left this month"
            assert "account broke" in why["reason"] and "$0.00 left" in why["reason"], why
            text = burstctl(cfg_path, "explain", str(j)).stdout
            assert "stays on-prem" in text and "broke" in text, text

        shown = json.loads(burstctl(cfg_path, "budget", "show", "--json").stdout)
        assert shown["accounts"]["broke"]["limit_micro_usd"] == 0, shown

        # raising the budget lets them burst in the next cycles
        burstctl(cfg_path, "budget", "set", "broke", "1")
        shown = json.loads(burstctl(cfg_path, "budget", "show", "--json").stdout)
        assert shown["accounts"]["broke"]["limit_micro_usd"] == 1_000_000, shown
        wait_for(finished(broke), 240, "the broke jobs to complete after the budget raise")
        assert all(host(j).startswith(prefix) and host(j) in slurm_bed.cloud_nodes for j in broke), \
            {j: host(j) for j in broke}
        assert all(slurm_bed.job(j).get("JobState") == "RUNNING" for j in blockers)  # on-prem stayed full
        for j in blockers:
            slurm_bed.run(["scancel", str(j)])

        # every cloud node powers down, every lease closes, the ledger catches up to the end of each lease
        def all_closed():
            rows = leases(cfg_path)
            return rows and all(r["state"] == "TERMINATED" for r in rows) and rows

        rows = wait_for(all_closed, 180, "every lease TERMINATED")
        wait_for(lambda: not cloud_namespaces(slurm_bed), 30, "no cloud namespace left")

        def powered_down():
            states = {n: slurm_bed.node(n).get("State", "") for n in slurm_bed.cloud_nodes}
            return all("POWERED_DOWN" in v and "POWERING" not in v for v in states.values()) and states

        wait_for(powered_down, 60, "every cloud node POWERED_DOWN in Slurm")
        store = Store.open(cfg.database.url)
        try:
            def accrued():
                ls = store.leases()
                return all(x.launched_at is None or (x.accrued_until or 0) >= x.ended_at for x in ls) and ls

            all_leases = wait_for(accrued, 30, "spend accrued to the end of every lease")
            cost = {x.lease_id: lease_cost(x, x.ended_at, store.price_points(x.lease_id)) for x in all_leases}
            by_lease = store.spend(by="lease")
        finally:
            store.close()
        assert {k: v for k, v in cost.items() if v} == by_lease, (cost, by_lease)
        total = sum(cost.values())
        assert total > 0

        def spend(by: str) -> dict[str, int]:
            data = json.loads(burstctl(cfg_path, "spend", "--by", by, "--json").stdout)
            return {r["key"]: r["spend_micro_usd"] for r in data["rows"]}

        by_account, by_job = spend("account"), spend("job")
        assert by_account.get("funded", 0) > 0 and by_account.get("broke", 0) > 0, by_account
        assert sum(by_account.values()) == total, (by_account, cost)
        # attributed (per job) + overhead == lease cost, to the micro-dollar
        assert sum(by_job.values()) == total, (by_job, cost)
        assert {str(j) for j in funded + broke} <= set(by_job), by_job
        assert by_account["broke"] <= 1_000_000, by_account  # within its raised budget
        # the broke jobs may land on nodes the funded ones powered up (still idle): charged to their own account
        # all the same, through the allocations the daemon recorded from Slurm's snapshots
        assert {r["node_name"] for r in rows} >= {host(j) for j in funded + broke}, rows
        # slurmdbd agrees: the jobs burstd charged are the ones sacct recorded on those cloud nodes, same accounts
        if slurm_bed.config.accounting:
            # since this test began: the bed's slurmdbd also holds the session's earlier tests' jobs
            check = json.loads(burstctl(cfg_path, "spend", "--reconcile", "--since", str(int(started)), "--json",
                                        check=False).stdout)
            assert check["ok"], check
            assert {j for j in funded + broke if host(j).startswith(prefix)} <= set(check["agree"]), check
            # and, where Slurm records instances (23.11+), it knows every VM burstd launched, on its node
            if check["instances"] is not None:
                up = {x.instance_id for x in all_leases if x.instance_id and x.ready_at}
                assert up and up <= set(check["instances"]["agree"]), check
            else:
                assert slurm_bed.slurm_release() < (23, 11), check


def test_a_budget_for_an_account_slurmdbd_does_not_know_is_refused(slurm_bed, tmp_path):
    """The bed runs slurmdbd with its accounts (physics, chemistry, funded, broke): they take budgets; a typo
    is refused with the accounts slurmdbd knows, and nothing is stored."""
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd")
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log"):
        burstctl(cfg_path, "budget", "set", "physics", "25")
        refused = burstctl(cfg_path, "budget", "set", "phsyics", "25", check=False)
        assert refused.returncode != 0, refused
        said = refused.stdout + refused.stderr
        assert "'phsyics' is not known to Slurm's accounting" in said and "physics" in said, said
        shown = json.loads(burstctl(cfg_path, "budget", "show", "--json").stdout)
        assert "physics" in shown["accounts"] and "phsyics" not in shown["accounts"], shown

