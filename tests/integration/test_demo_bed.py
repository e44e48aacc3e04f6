"""``burstctl demo`` as CI runs it (output piped, not a terminal) on the session's bed: plain progress lines as
the jobs burst, a labelled summary, and with ``--keep`` the working folder named at the end (it is removed
otherwise; the bed stays up for the other tests either way because ``--keep`` is given)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def _on_the_session_bed(bed) -> dict[str, str]:
    """The environment that makes the demo's `testbed up` find the session's bed as it is (tests/bed.py sets
    other timers than the CLI's defaults; any difference is refused as "already up with other settings")."""
    c = bed.config
    return {**os.environ, "BURSTD_BED_NAME": bed.name, "COLUMNS": "100",
            **{f"BURSTD_BED_{k.upper()}": str(getattr(c, k))
               for k in ("slot", "suspend_time", "suspend_timeout", "cred_expire", "resume_timeout")}}


def test_demo_piped_prints_progress_lines_a_clean_summary_and_names_its_kept_folder(slurm_bed, bed_user, tmp_path):
    c = slurm_bed.config
    env = _on_the_session_bed(slurm_bed)
    summary = tmp_path / "summary.json"
    # the demo runs on the session's bed as it is: cloud VMs from the node image (BURSTD_BED_CLOUD_IMAGE=default,
    # the demo's own default) or, on a session bed without one, sharing the head's files
    shared = [] if c.cloud_image else ["--shared-fs"]
    r = subprocess.run([sys.executable, "-m", "burstd.cli.app", "demo", "--jobs", "4", "--job-seconds", "20",
                        "--user", bed_user, "--keep", "--json", str(summary), "--timeout", "240", *shared],
                       capture_output=True, text=True, env=env, timeout=420)
    out = r.stdout
    kept = re.search(r"working folder (/\S+)", out)
    try:
        assert r.returncode == 0, out + r.stderr
        progress = [line for line in out.splitlines() if re.match(r"\s+[a-z ;,]+: jobs [A-Z]+=\d", line)]
        assert any("bursting onto cloud nodes" in line for line in progress), out
        assert len(progress) == len(set(progress)), "a progress line repeated though nothing changed"
        assert "\x1b[" not in out  # no terminal control sequences in a log
        assert "ran on cloud nodes" in out and "{" not in out.split("summary", 1)[1], out
        data = json.loads(summary.read_text())
        assert data["finished"] and data["leaked_vms"] == 0 and data["jobs_on_cloud"] >= 2, data
        assert kept and Path(kept.group(1)).is_dir() and (Path(kept.group(1)) / "burstd.db").exists(), out
    finally:
        if kept:
            shutil.rmtree(kept.group(1), ignore_errors=True)


def test_demo_ha_kills_the_leader_mid_storm_and_the_standby_finishes_it(slurm_bed, bed_user, tmp_path):
    """``burstctl demo --ha``: two daemons on a throwaway PostgreSQL, the leader SIGKILLed while a cloud launch is
    under way; the standby (which took Slurm's resume calls all along) leads within the configured bound and every
    job completes, with no VM left and none doubled."""
    from burstd.cli.demo_ha import LEASE_S, RENEW_S

    c = slurm_bed.config
    env = _on_the_session_bed(slurm_bed)
    summary = tmp_path / "summary.json"
    shared = [] if c.cloud_image else ["--shared-fs"]  # the session bed as it is (see the test above)
    r = subprocess.run([sys.executable, "-m", "burstd.cli.app", "demo", "--ha", "--jobs", "4", "--job-seconds", "20",
                        "--user", bed_user, "--keep", "--json", str(summary), "--timeout", "240", *shared],
                       capture_output=True, text=True, env=env, timeout=420)
    out = r.stdout
    kept = re.search(r"working folder (/\S+)", out)
    try:
        assert summary.exists(), out + r.stderr
        data = json.loads(summary.read_text())
        assert data["leader_killed"] == "head-b" and data["leader_after"] == "head-a", data
        assert data["failover_s"] is not None and data["failover_s"] <= LEASE_S + RENEW_S + 2, data
        assert data["failover_bound_s"] == LEASE_S + RENEW_S
        assert data["leaked_vms"] == 0 and data["duplicate_vms"] == 0, data
        assert data["jobs_completed"] == data["jobs_submitted"] == 4 and data["jobs_on_cloud"] >= 1, (
            f"not completed: {data['jobs_not_completed']}; hosts {data['hosts']}; leases {data['leases_by_state']}\n"
            + out + _log_tails(kept))
        assert data["finished"] and r.returncode == 0, out + r.stderr
        assert "standby led after (s)" in out and "leader head-b killed" in out, out
    finally:
        if kept:
            shutil.rmtree(kept.group(1), ignore_errors=True)


def _log_tails(kept, lines: int = 60) -> str:
    """The end of each head's daemon log in the demo's kept folder (what a failed CI run needs to show)."""
    if not kept:
        return ""
    tails = []
    for log in sorted(Path(kept.group(1)).glob("head-*/burstd.log")):
        tails.append(f"--- {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(tails)
