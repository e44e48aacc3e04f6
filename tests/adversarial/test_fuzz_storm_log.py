"""The storm's reader of a job's log (burstd/testbed/storm_summary.py), fed hostile text by hypothesis: a job's log
holds whatever the job printed. It returns runs of rank 0's steps or an empty list and never raises, and the
summary built on it never raises either. Seeds are the template's and burstd.train.example's own lines."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.testbed.storm_summary import JobRecord, Preemption, job_summary, runs_of, storm_failures

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

tokens = st.one_of(
    st.sampled_from(["job 7 run 1 on cloud1, checkpoints in /c", "rank=0 step=", "rank=1 step=", " t=", "12",
                     "1764198000.5", ".", "1.2.3", " loss=0.1", "\n", " ", "٣", "\x00", "e9"]),
    st.text(max_size=12),
)
hostile = st.lists(tokens, max_size=40).map("".join)


@FUZZ
@given(hostile, st.lists(st.booleans(), max_size=3))
def test_a_hostile_log_gives_runs_or_nothing_and_a_summary_never_raises(text, notices):
    runs = runs_of(text)
    assert all(isinstance(s.number, int) and s.number >= 0 and isinstance(s.at, float) for r in runs for s in r)
    job = JobRecord("j", 1, 2, 4, 10, [Preemption(n, 0.0) for n in notices])
    s = job_summary(job, text, bit_identical=True)
    assert len(s["back_to_training_s"]) == len(notices)
    assert isinstance(storm_failures({"jobs_submitted": 1, "jobs_completed": 1, "leaked_vms": 0, "jobs": {"j": s}}),
                      list)
