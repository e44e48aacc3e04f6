"""Fuzz targets for the two parsers of a job's progress report (issue 26 item 2): what ``unmunge`` prints
(``job_credentials.read_unmunge``) and the report a job seals (``job_progress.parse_report``). Each returns a
result or its one documented error; a report that parses is within its bounds."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from burstd.daemon.job_credentials import JobCaller, MungeRefused, read_unmunge
from burstd.daemon.job_progress import ProgressReport, parse_report
from tests.adversarial.test_fuzz_parsers import FUZZ, json_value

meta_line = st.one_of(
    st.tuples(st.sampled_from(["STATUS", "ENCODE_HOST", "UID", "GID", "TTL", "X"]),
              st.one_of(st.integers(-5, 2**40).map(str), st.text(max_size=30))).map(lambda kv: f"{kv[0]}: {kv[1]}"),
    st.text(max_size=40))
unmunge_out = st.one_of(
    st.binary(max_size=300),
    st.tuples(st.lists(meta_line, max_size=6), st.binary(max_size=100)).map(
        lambda t: "\n".join(t[0]).encode("utf-8", "surrogatepass") + b"\n\n" + t[1]))
report_value = st.one_of(json_value, st.integers(-2**70, 2**70), st.floats(), st.text(max_size=20))
report_doc = st.one_of(
    st.binary(max_size=300),
    json_value.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["v", "job", "step", "step_time_s", "gpu_util", "steps_per_epoch", "x"]),
                    report_value, max_size=6).map(lambda d: json.dumps(d, allow_nan=True).encode()))


@FUZZ
@given(unmunge_out)
def test_unmunge_output_reads_or_raises_munge_refused(out):
    try:
        caller = read_unmunge(out)
    except MungeRefused:
        return
    assert isinstance(caller, JobCaller) and caller.uid >= 0 and caller.gid >= 0 and caller.host


@FUZZ
@given(report_doc)
def test_a_sealed_report_parses_within_bounds_or_raises_value_error(raw):
    try:
        report = parse_report(raw)
    except ValueError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert isinstance(report, ProgressReport)
    assert 1 <= report.job < 2**32 and report.step >= 0
    assert math.isfinite(report.step_time_s) and 0 < report.step_time_s <= 86_400
    assert all(0 <= u <= 100 for u in report.gpu_util or ())
