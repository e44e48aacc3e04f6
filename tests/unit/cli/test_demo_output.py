"""``burstctl demo`` output away from a terminal (CI logs, ``| tee``): plain progress lines, printed only when
something changed, and a summary table with labelled rows and no Python dict inside."""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from burstd.cli import demo_watch

SUMMARY = {"jobs_submitted": 6, "jobs_completed": 6, "jobs_on_cloud": 4, "jobs_on_prem": 2,
           "leases_by_state": {"TERMINATED": 4}, "leaked_vms": 0, "finished": True, "hosts": {},
           "slurm_version": "24.11.5", "accounting": True}


def test_progress_is_one_plain_line_per_change(monkeypatch):
    out = Console(width=200, force_terminal=False, record=True)
    monkeypatch.setattr(demo_watch, "console", out)
    jobs = {1: {"JobState": "PENDING"}, 2: {"JobState": "RUNNING", "NodeList": "onprem1"}}
    with demo_watch.Watch() as watch:
        assert watch.live is None  # not a terminal: no live table
        watch.update(jobs, {"cloud1": "idle~"}, Counter(), "cloud", "pending")
        watch.update(jobs, {"cloud1": "idle~"}, Counter(), "cloud", "pending")  # nothing changed: no line
        watch.update(jobs, {"cloud1": "mixed"}, Counter({"READY": 1}), "cloud", "bursting")
    lines = out.export_text().splitlines()
    assert lines == ["  pending: jobs PENDING=1 RUNNING=1; cloud nodes cloud1=idle~; leases none",
                     "  bursting: jobs PENDING=1 RUNNING=1; cloud nodes cloud1=mixed; leases READY=1"]


def test_summary_rows_are_labelled_and_flat():
    out = Console(width=100, force_terminal=False, record=True)
    out.print(demo_watch.summary_table(SUMMARY))
    text = out.export_text()
    assert "{" not in text and "'" not in text, text
    assert "ran on cloud nodes" in text and "TERMINATED 4" in text and "finished cleanly" in text
    assert "yes" in text and "True" not in text
    assert "Slurm" in text and "24.11.5" in text and "slurmdbd" in text


def test_where_a_job_ran_is_slurms_nodelist_not_its_output_file():
    # a burst job's output stays on its cloud node (booted from the node image): the head cannot read it
    class Bed:
        jobs = {1: {"NodeList": "cloud1"}, 2: {"NodeList": "onprem2"}, 3: {"NodeList": "(null)"}, 4: {}}

        def job(self, j):
            return self.jobs[j]

    assert demo_watch.host_of_jobs(Bed(), "burstuser", [1, 2, 3, 4]) == {1: "cloud1", 2: "onprem2", 3: "", 4: ""}
