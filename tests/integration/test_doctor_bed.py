"""``burstctl doctor`` on the test bed as the bed sets it up: the bed's slurmctld keeps accounting in slurmdbd but
does not enforce associations (``AccountingStorageEnforce`` unset), and doctor must say so, loudly, with the fix
(issue 26 item 3, issue 21 item 2). Real slurmctld, real ``scontrol show config``, real munge."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.bed]


def test_doctor_names_the_association_enforcement_the_bed_lacks(slurm_bed):
    r = subprocess.run([sys.executable, "-m", "burstd.cli.app", "doctor", "-c", str(slurm_bed.burstd_config),
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    found = {f["check"]: f for f in json.loads(r.stdout)}
    assert "association enforcement" in found, r.stdout  # missing: the config or scontrol failed first (shown)
    enforce = found["association enforcement"]
    assert enforce["level"] == "fail" and "AccountingStorageEnforce=associations" in enforce["fix"], enforce
    assert found["slurmdbd"]["level"] == "ok", found["slurmdbd"]  # the bed does run slurmdbd
    assert found["munge"]["level"] == "ok", found["munge"]
