"""Trace readers: real files parse; garbage gets an error that names the file and the line."""

from __future__ import annotations

import gzip

import pytest

from burstd.simulate.traces import TraceError, read_trace
from tests.public_traces import public_trace

SWF_HEAD = "; MaxProcs: 64\n; MaxNodes: 8\n"
SWF_OK = "1 0 5 100 8 -1 -1 8 200 -1 1 3 2 -1 1 -1 -1 -1\n2 10 0 50 -1 -1 -1 16 -1 -1 1 4 -1 -1 1 -1 -1 -1\n"


def write(tmp_path, name, text, gz=False):
    p = tmp_path / name
    if gz:
        with gzip.open(p, "wt") as fh:
            fh.write(text)
    else:
        p.write_text(text)
    return p


def test_swf_reads_fields_header_and_gzip(tmp_path):
    jobs, info = read_trace(write(tmp_path, "t.swf.gz", SWF_HEAD + SWF_OK, gz=True))
    assert info.max_procs == 64 and info.max_nodes == 8
    assert [(j.job_id, j.submit, j.runtime, j.time_limit, j.cpus, j.user, j.account) for j in jobs] == [
        (1, 0.0, 100.0, 200.0, 8, "u3", "g2"), (2, 10.0, 50.0, 50.0, 16, "u4", "u4")]


@pytest.mark.parametrize("line, what", [
    ("3 20 0 50 8 -1 -1 8 100 -1 1 3\n", "18 fields, this line has 12"),
    ("3 20 0 fifty 8 -1 -1 8 100 -1 1 3 2 -1 1 -1 -1 -1\n", "field run time is not a number"),
    ("3 20 0 nan 8 -1 -1 8 100 -1 1 3 2 -1 1 -1 -1 -1\n", "field run time is not finite"),
])
def test_swf_garbage_line_names_file_and_line(tmp_path, line, what):
    p = write(tmp_path, "t.swf", SWF_HEAD + SWF_OK + line)
    with pytest.raises(TraceError, match=rf"t\.swf:5: .*{what}"):
        read_trace(p)


def test_philly_reads_and_rejects_garbage(tmp_path):
    head = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n"
    jobs, _ = read_trace(write(tmp_path, "philly.csv", head + "0,5.0,CLOS,1,8,100.0\n1,7.0,CLOS,1,2,0\n"))
    assert [(j.gpus, j.runtime) for j in jobs] == [(8, 100.0)]
    with pytest.raises(TraceError, match=r"philly\.csv:3: a Philly record has 6"):
        read_trace(write(tmp_path, "philly.csv", head + "0,5.0,CLOS,1,8,100.0\n<html>oops</html>\n"))


def test_sacct_parsable2_export(tmp_path):
    text = ("JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|NCPUS|NNodes|AllocTRES|State\n"
            "10|alice|chem|batch|2024-01-01T00:00:00|2024-01-01T00:10:00|2024-01-01T01:10:00|01:00:00|"
            "1-00:00:00|16|2|cpu=16,gres/gpu=4|COMPLETED\n"
            "10.batch|||||||01:00:00||16|1||COMPLETED\n"
            "11|bob|bio|batch|2024-01-01T00:05:00|Unknown|Unknown|00:00:00|UNLIMITED|1|1||CANCELLED\n")
    jobs, info = read_trace(write(tmp_path, "site.sacct", text))
    assert [(j.job_id, j.runtime, j.time_limit, j.cpus, j.gpus, j.account) for j in jobs] == [
        (10, 3600.0, 86400.0, 16, 4, "chem")]
    assert info.skipped == 1
    bad = text.replace("01:00:00|1-00", "an hour|1-00")
    with pytest.raises(TraceError, match=r"site\.sacct:2: Elapsed is not a Slurm duration"):
        read_trace(write(tmp_path, "site.sacct", bad))


@pytest.mark.parametrize(("name", "units"), [
    ("swf/SDSC-BLUE-2000-4.2-cln.swf.gz", 1152), ("swf/CTC-SP2-1996-3.1-cln.swf.gz", 338),
    ("swf/KTH-SP2-1996-2.1-cln.swf.gz", 100), ("gpu/philly_trace_rfold.csv.gz", None)])
def test_real_traces_parse(name, units):
    """The public traces (their in-repo samples, or the whole ones under BURSTD_TRACES): the first 2,000 jobs
    read, with the header's machine size; the samples hold exactly those jobs (examples/traces/README.md)."""
    jobs, info = read_trace(public_trace(name), limit_jobs=2000)
    assert len(jobs) == 2000 and info.max_procs == units
    assert len({j.job_id for j in jobs}) == 2000 and all(j.runtime > 0 for j in jobs)
    if units is None:  # Philly: every job asks for GPUs
        assert all(j.gpus >= 1 for j in jobs)
    else:
        assert all(1 <= j.cpus <= units for j in jobs)


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        read_trace(write(tmp_path, "x.bin", "hello"))
