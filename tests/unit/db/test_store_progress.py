"""Training jobs' progress records in the Store (issue 26), on SQLite and PostgreSQL: one row a job, the newest
first within the limit, and a report older than ``KEEP_S`` forgotten at the next save."""

from __future__ import annotations

from burstd.db.progress_records import KEEP_S


def test_one_record_a_job_the_newest_within_the_limit_and_stale_ones_forgotten(store):
    store.save_progress(1, "a", at=1000.0)
    store.save_progress(2, "b", at=1001.0)
    store.save_progress(1, "a2", at=1002.0)  # job 1 again: its row replaced, now the newest
    assert store.progress_records(10) == ["b", "a2"]
    assert store.progress_records(1) == ["a2"]
    store.save_progress(3, "c", at=1001.5 + KEEP_S)  # job 2's report is now more than KEEP_S old
    assert store.progress_records(10) == ["a2", "c"]
    store.save_progress(4, "d", at=1003.0 + KEEP_S)
    assert store.progress_records(10) == ["c", "d"]
