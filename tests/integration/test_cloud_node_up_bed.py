"""A cloud node that is already up runs only jobs the eligibility rule lets in (issue 21 item 1), on the live bed.

A node that is up takes any job of its partition without a resume call, so burstd's launch guard never sees such
a job. Before the fix, once a funded job had brought a node up, ``sbatch -p cloud -A broke`` ($0 budget) and any
job of an excluded user ran on it at once. Now the daemon keeps the rule in Slurm itself, every cycle: the cloud
partition denies the unfunded and excluded accounts (DenyAccounts, on top of slurm.conf's own), and a MAGNETIC
reservation over the cloud nodes denies the excluded users (Slurm has no per-user partition setting) and allows
only the funded accounts slurmdbd knows. Slurm then never starts those jobs, with no race against the cycle, on
every release: from 23.02 on the partition's account lists hold only with AccountingStorageEnforce=associations
(the bed has none), the reservation's account list holds without it. burstd also holds them with the reason in
the AdminComment, and a funded job still runs on the node that is up.

Real parts only: Slurm (the bed, with slurmdbd), the burstd daemon process, the local provider's network-namespace
VMs.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from burstd.config import load_config
from tests.integration.daemon_bed import bed_daemon_config, diagnosis, running_daemon, wait_for

pytestmark = [pytest.mark.bed, pytest.mark.slow]

NEVER_RAN = {"PENDING"}


def admin_comment(bed, job: int) -> str:
    out = bed.run(["scontrol", "show", "job", str(job)], check=False).stdout
    m = re.search(r"AdminComment=(.*)$", out, re.M)
    return m.group(1).strip() if m else ""


def test_a_node_already_up_refuses_unfunded_accounts_and_excluded_users_but_runs_funded_jobs(
        slurm_bed, bed_user, other_user, tmp_path):
    cfg_path = bed_daemon_config(
        slurm_bed, tmp_path / "burstd", policy={"exclude_users": [other_user]},
        budget={"default_account_usd": 100, "accounts": {"funded": 10, "broke": 0}},
    )
    cloud = slurm_bed.cloud_partition
    reservation = f"burstd_{load_config(cfg_path).cluster.id}"
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon:  # resets what the gate wrote
        def submit(account: str, user: str, node: str | None = None, seconds: int = 2) -> int | str:
            """The job id, or Slurm's refusal at submission (newer releases refuse a denied account there)."""
            where = ["-w", node] if node else []
            try:
                return slurm_bed.sbatch(["-p", cloud, f"--account={account}", "-N", "1", "-t", "5", *where,
                                         "-o", "out-%j.txt"], f"#!/bin/sh\nhostname\nsleep {seconds}\n",
                                        user=user)
            except subprocess.CalledProcessError as exc:
                return f"refused at submission: {exc.stderr or exc.stdout}"

        # a funded job brings a cloud node up (its resume call, its lease)
        first = submit("funded", bed_user)
        assert isinstance(first, int), first
        diagnose = diagnosis(slurm_bed, [first], cfg_path, daemon)
        wait_for(lambda: slurm_bed.job(first).get("JobState") == "COMPLETED", 240, "the funded job to complete",
                 diagnose=diagnose)
        node = (slurm_bed.workdir(bed_user) / f"out-{first}.txt").read_text().split()[0]
        assert node in slurm_bed.cloud_nodes, node
        assert "POWER" not in slurm_bed.node(node).get("State", ""), slurm_bed.node(node)  # up and idle

        # straight at the node that is up: a funded job, then a $0 account and an excluded user beside it (the
        # node has a CPU free for each of them in turn). The funded one goes first: a job Slurm cannot place
        # blocks those behind it in its partition until the backfill pass, which may come after the node is down
        funded = submit("funded", bed_user, node)
        assert isinstance(funded, int), funded
        broke = submit("broke", bed_user, node, seconds=30)
        excluded = submit("chemistry", other_user, node, seconds=30)  # chemistry is funded: only the user is refused
        jobs = [j for j in (broke, excluded, funded) if isinstance(j, int)]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon)

        seen: dict[int, set[str]] = {j: set() for j in jobs if j != funded}

        def funded_done_and_others_pending():
            for j in seen:
                seen[j].add(slurm_bed.job(j).get("JobState", "?"))
            return slurm_bed.job(funded).get("JobState") == "COMPLETED"

        wait_for(funded_done_and_others_pending, 60, "the funded job to run on the node that is up",
                 interval=0.3, diagnose=diagnose)
        ran_on = (slurm_bed.workdir(bed_user) / f"out-{funded}.txt").read_text().split()[0]
        assert ran_on == node
        # and a few more cycles (the bed's cycle is 2 s): the refused jobs never started
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            funded_done_and_others_pending()
            time.sleep(0.3)
        for j, states in seen.items():
            assert states <= NEVER_RAN, (j, states, diagnose())
        assert not (slurm_bed.workdir(other_user) / f"out-{excluded}.txt").exists()

        if isinstance(broke, int):  # the $0 account never ran, on any release
            assert not (slurm_bed.workdir(bed_user) / f"out-{broke}.txt").exists()
        else:
            assert "account" in broke.lower(), broke
        # the excluded user: held by burstd, the reason where the user reads it
        assert isinstance(excluded, int), excluded
        wait_for(lambda: admin_comment(slurm_bed, excluded).startswith("burstd-hold:"), 20,
                 "burstd's hold on the excluded user's job", diagnose=diagnose)
        assert f"user {other_user} is excluded" in admin_comment(slurm_bed, excluded)
        assert slurm_bed.job(excluded).get("Reason") == "JobHeldAdmin", slurm_bed.job(excluded)

        # what Slurm holds: the partition's DenyAccounts and the reservation's deny list
        part = slurm_bed.run(["scontrol", "show", "partition", cloud, "-o"]).stdout
        assert re.search(r"DenyAccounts=\S*\bbroke\b", part), part
        # (a write Slurm refused, say an scontrol that timed out on a loaded machine, is tried again a reread later)
        def reservation_line() -> str:
            resv = slurm_bed.run(["scontrol", "show", "reservation", "-o"]).stdout
            return next((line for line in resv.splitlines() if f"ReservationName={reservation} " in line), "")
        wait_for(lambda: re.search(rf"Users=-{other_user}\b", reservation_line()), 90,
                 f"reservation {reservation} to deny {other_user}", diagnose=diagnose)
        accounts = re.search(r"Accounts=(\S+)", reservation_line())
        assert accounts is not None, reservation_line()
        allowed = accounts.group(1).split(",")
        assert "funded" in allowed and "broke" not in allowed, allowed

        # an account slurmdbd does not know: without enforced associations Slurm charges the job to the user's
        # default account (physics, funded here), so the reservation and burstd judge the account it really has
        made_up = submit("madeupxyz", bed_user, seconds=1)
        if isinstance(made_up, int):
            assert slurm_bed.job(made_up).get("Account") == "physics", slurm_bed.job(made_up)
            jobs.append(made_up)
        slurm_bed.run(["scancel", *map(str, jobs)], check=False)
