"""Jobs sent straight to the cloud partition (``sbatch -p cloud``) on the live bed meet the same policy and budget
as jobs burstd chose, and budgets belong to accounts slurmdbd vouches for (issue 21 items 1 and 2).

Such a job reaches burstd's resume hook before any snapshot holds it. Before the fix the lease got account ''
and the guard checked the "(none)" budget: an excluded account or a $0 account ran on cloud nodes (with a
funded "(none)" budget), and a funded job was refused once and requeued. Now:

* ``-A funded`` (as a user slurmdbd associates with it) launches at its first resume call and runs on a cloud
  node, its lease charged to ``funded``;
* ``-A physics`` (excluded) and ``-A broke`` ($0 budget) are refused before any VM is asked for, each with its
  reason: by the launch guard, or (from the daemon's first cycle on) by the cloud gate's hold or Slurm's own
  DenyAccounts (``tests/integration/test_cloud_node_up_bed.py``);
* ``-A made-up`` (unknown to slurmdbd) and ``-A funded`` as root (not associated with it): the lease carries the
  account Slurm gave the job, and where Slurm kept the typed string burstd refuses to charge it.

Real parts only: Slurm (the bed, with slurmdbd) calling burstd's hooks, the daemon process, SQLite, the local
provider's network-namespace VMs.
"""

from __future__ import annotations

import re

import pytest

from burstd.config import load_config
from tests.integration.daemon_bed import bed_daemon_config, diagnosis, leases, running_daemon, wait_for

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def test_straight_to_cloud_jobs_meet_exclusions_budgets_and_associations(slurm_bed, bed_user, tmp_path):
    cfg_path = bed_daemon_config(
        slurm_bed, tmp_path / "burstd", policy={"exclude_accounts": ["physics"]},
        budget={"default_account_usd": 100, "accounts": {"funded": 10, "broke": 0}},
    )
    cfg = load_config(cfg_path)
    cloud = slurm_bed.cloud_partition
    prefix = cfg.pools[0].node_prefix

    def submit(account: str, user: str | None = bed_user, seconds: int = 2) -> int:
        return slurm_bed.sbatch(["-p", cloud, f"--account={account}", "-N", "1", "--exclusive", "-t", "5",
                                 "-o", "out-%j.txt"], f"#!/bin/sh\nhostname\nsleep {seconds}\n", user=user)

    def admin_comment(job: int) -> str:
        out = slurm_bed.run(["scontrol", "show", "job", str(job)], check=False).stdout
        m = re.search(r"AdminComment=(.*)$", out, re.M)
        return m.group(1).strip() if m else ""

    def leases_of(job: int) -> list[dict]:
        return [r for r in leases(cfg_path) if job in r["job_ids"]]

    def all_down():
        states = {n: slurm_bed.node(n).get("State", "") for n in slurm_bed.cloud_nodes}
        return all("POWERED_DOWN" in v and "POWERING" not in v for v in states.values()) and states

    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:
        # each phase starts with every cloud node powered down: a node already up takes any job of its partition
        # without a resume call (what the generated partition lines are for; the bed's slurm.conf has none). One
        # node a job (--exclusive), so each lease names one job and one reason
        refused = {
            submit("physics"): "account physics is excluded",
            submit("broke"): "account broke has",  # "$0.00 left" at the guard, "no cloud budget left" in a hold
        }
        # Slurm with slurmdbd may swap a string it does not know for the user's default account (the bed's does,
        # unenforced; burstuser's default is physics): the account Slurm gives the job is the one judged
        typed = {submit("made-up"): ("made-up", "is not known to Slurm's accounting")}
        everything = [*refused, *typed]
        diagnose = diagnosis(slurm_bed, everything, cfg_path, daemon)

        def refusal_of(job: int) -> tuple[str, str] | None:
            """How the job was refused: by the launch guard (a REFUSED lease), by the cloud gate's hold (from
            the daemon's first cycle on; the reason in the AdminComment), or by Slurm on the partition's
            DenyAccounts (where Slurm enforces it: no resume call, no lease)."""
            got = leases_of(job)
            if any(r["state"] == "REFUSED" for r in got):
                return "lease", " | ".join(r["reason"] for r in got)
            comment = admin_comment(job)
            if comment.startswith("burstd-hold:"):
                return "hold", comment
            reason = slurm_bed.job(job).get("Reason", "")
            if not got and "account_not_permitted" in reason:
                return "slurm", reason
            return None

        def refused_all():
            seen = {j: refusal_of(j) for j in everything}  # read once: a job moves from one way to another
            return all(seen.values()) and seen

        got = wait_for(refused_all, 150, "every job refused", diagnose=diagnose)
        for job, why in refused.items():
            kind, detail = got[job]
            if kind == "lease":
                assert all(r["state"] == "REFUSED" and why in r["reason"] for r in leases_of(job)), leases_of(job)
            elif kind == "hold":
                assert why in detail, detail
        for job, (account, why) in typed.items():
            slurm_account = slurm_bed.job(job).get("Account", "")
            assert slurm_account in (account, "physics"), slurm_bed.job(job)
            assert all(r["account"] == slurm_account for r in leases_of(job)), (job, slurm_account, leases_of(job))
            why = why if slurm_account == account else "account physics is excluded"
            kind, detail = got[job]
            if kind == "lease":
                assert all(r["state"] == "REFUSED" and why in r["reason"] for r in leases_of(job)), leases_of(job)
            elif kind == "hold":
                assert why in detail, detail
        for job in everything:
            assert all(not r.get("instance_id") for r in leases_of(job)), leases_of(job)  # no VM ever asked for
            assert not (slurm_bed.workdir(bed_user) / f"out-{job}.txt").exists()  # never ran
        slurm_bed.run(["scancel", *map(str, everything)], check=False)
        wait_for(all_down, 180, "every cloud node POWERED_DOWN", diagnose=diagnose)

        # root typing -A funded, with no association in funded: never charged to funded
        root_job = submit("funded", user=None)
        diagnose = diagnosis(slurm_bed, [root_job], cfg_path, daemon)

        def held_by_burstd() -> bool:  # the cloud gate's hold: slurmdbd does not associate root with funded
            return "user 'root' has no association" in admin_comment(root_job)

        def root_settled():
            got = leases_of(root_job)
            return (any(r["state"] == "REFUSED" for r in got) or held_by_burstd()
                    or slurm_bed.job(root_job).get("JobState") == "COMPLETED") and (got or held_by_burstd())

        wait_for(root_settled, 150, "root's job refused, held or run under its own account", diagnose=diagnose)
        got_root = leases_of(root_job)
        slurm_account = slurm_bed.job(root_job).get("Account", "")
        assert all(r["account"] == slurm_account for r in got_root), (slurm_account, got_root)
        if slurm_account == "funded":  # Slurm kept the typed string: burstd refuses to charge it
            assert all(r["state"] == "REFUSED" and "user 'root' has no association with account 'funded'"
                       in r["reason"] for r in got_root), got_root
        slurm_bed.run(["scancel", str(root_job)], check=False)
        wait_for(all_down, 180, "every cloud node POWERED_DOWN", diagnose=diagnose)

        funded = submit("funded")
        diagnose = diagnosis(slurm_bed, [funded], cfg_path, daemon)
        wait_for(lambda: slurm_bed.job(funded).get("JobState") == "COMPLETED", 240, "the funded job to complete",
                 diagnose=diagnose)
        host = (slurm_bed.workdir(bed_user) / f"out-{funded}.txt").read_text().split()[0]
        assert host.startswith(prefix) and host in slurm_bed.cloud_nodes, host
        rows = leases_of(funded)
        assert rows and all(r["account"] == "funded" for r in rows), rows
        assert not [r for r in rows if r["state"] == "REFUSED"], rows  # launched at its first resume call
        assert int(slurm_bed.job(funded).get("Restarts", "0")) == 0
