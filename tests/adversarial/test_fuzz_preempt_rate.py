"""Hostile rate files and daemon answers: the TaskProlog's export line carries a plain number or nothing."""

from __future__ import annotations

import json
import os
import re

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import burstd.agent.preempt_rate as pr
import burstd.agent.report as report
from burstd.agent.report import DaemonUnreachable

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
LINE = re.compile(r"export BURSTD_PREEMPT_RATE_PER_HOUR=[0-9.e+-]+")
JSONISH = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=3), max_leaves=8)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200) | st.text(max_size=80).map(str.encode))
def test_any_file_gives_one_plain_export_line_or_none(tmp_path, raw):
    path = tmp_path / "rate"
    path.write_bytes(raw)
    lines = pr.task_prolog_lines({}, str(path))
    assert len(lines) <= 1 and all(LINE.fullmatch(line) for line in lines)


@settings(max_examples=EXAMPLES)
@given(st.dictionaries(st.sampled_from(["rate_per_node_hour", "pool", "x"]), JSONISH, max_size=3) | JSONISH)
def test_any_daemon_answer_gives_a_valid_rate_none_or_daemon_unreachable(body):
    def answer(request: httpx.Request) -> httpx.Response:
        # json.dumps, not httpx's json=: a body may carry NaN or Infinity, as Python's own encoder writes them
        return httpx.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    original = report._client
    report._client = lambda *a, **k: (httpx.Client(transport=httpx.MockTransport(answer)), "http://d")  # the edge
    try:
        rate = pr.fetch_rate("unix:/nonexistent", "cloud1")
    except DaemonUnreachable:
        return
    finally:
        report._client = original
    assert rate is None or (0 <= rate <= 3600 and float(pr.rate_text(rate)) == rate)
