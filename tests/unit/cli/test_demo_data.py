"""`burstctl demo --data`'s own parts (burstd/cli/demo_data.py): the job script declares what the decision and the
prolog read, the check of what a job read, and the done rule. The live run is `burstctl demo --data` on a bed
(docs/data.md, README)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

from burstd.cli.demo_data import _sums_match, data_ok, data_script
from burstd.domain.data_directives import parse_data_directives


def test_the_demo_job_declares_its_input_its_output_and_the_never_leave_rule(tmp_path):
    plain = parse_data_directives(data_script(tmp_path / "ds", tmp_path / "out", 5), source="demo")
    assert [i.path for i in plain.inputs] == [str(tmp_path / "ds")]
    assert [o.path for o in plain.outputs] == [str(tmp_path / "out")] and not plain.never_leaves
    home = parse_data_directives(data_script(tmp_path / "ds", tmp_path / "out", 5, home_only=True), source="demo")
    assert home.never_leaves


def test_an_output_counts_as_verified_only_when_the_job_read_the_heads_bytes(tmp_path):
    src, out = tmp_path / "ds", tmp_path / "out"
    (src / "meta").mkdir(parents=True)
    (src / "train.bin").write_bytes(b"\x00" * 1000)
    (src / "meta" / "labels.txt").write_text("1,1\n")
    script = tmp_path / "job.sh"
    script.write_text(data_script(src, out, 0).replace("hostname >", "echo node >"))
    if shutil.which("sha256sum"):
        subprocess.run(["sh", str(script)], check=True)  # the job's own lines, run here
        assert _sums_match(src, out)
    (out / "sums.txt").write_text(f"{hashlib.sha256(b'other').hexdigest()}  train.bin\n")
    assert not _sums_match(src, out)
    assert not _sums_match(src, tmp_path / "missing")


def test_done_means_all_complete_all_verified_a_cache_hit_money_booked_nothing_leaked():
    good = {"jobs_submitted": 6, "jobs_completed": 6, "outputs_verified": 6, "cache_hits": 2, "transfer_usd": 0.01,
            "leaked_vms": 0}
    assert data_ok(good)
    for bad in ({"outputs_verified": 5}, {"cache_hits": 0}, {"transfer_usd": 0.0}, {"leaked_vms": 1},
                {"jobs_completed": 5}):
        assert not data_ok(good | bad), bad
