"""Trace readers refuse what a simulation cannot use, naming the file and the job (issue 9 item 11)."""

from __future__ import annotations

import pytest

from burstd.simulate.traces import TraceError, read_trace

REC = "{id} {submit} 0 100 {procs} -1 -1 {procs} 200 -1 1 3 2 -1 1 -1 -1 -1\n"


def _swf(tmp_path, *records: str):
    p = tmp_path / "t.swf"
    p.write_text("; MaxProcs: 64\n" + "".join(records))
    return p


def test_a_duplicate_job_id_is_a_clear_error(tmp_path):
    p = _swf(tmp_path, REC.format(id=7, submit=0, procs=8), REC.format(id=7, submit=10, procs=4))
    with pytest.raises(TraceError, match=r"t.swf: job id 7 appears more than once"):
        read_trace(p)


@pytest.mark.parametrize("body", ["", "; only a header\n", REC.format(id=1, submit=0, procs=0)])
def test_a_trace_without_jobs_is_an_error_not_an_empty_report(tmp_path, body):
    p = tmp_path / "t.swf"
    p.write_text(body)
    with pytest.raises(TraceError, match="no jobs to simulate"):
        read_trace(p)


@pytest.mark.parametrize("procs", ["1e300", "20000000"])
def test_an_absurd_cpu_count_is_refused_not_silently_left_out(tmp_path, procs):
    p = _swf(tmp_path, REC.format(id=1, submit=0, procs=8), REC.format(id=2, submit=5, procs=procs))
    with pytest.raises(TraceError, match="job 2 asks for"):
        read_trace(p)


def test_a_sane_trace_still_reads(tmp_path):
    jobs, info = read_trace(_swf(tmp_path, REC.format(id=1, submit=0, procs=8), REC.format(id=2, submit=5, procs=4)))
    assert [j.job_id for j in jobs] == [1, 2] and info.max_procs == 64
