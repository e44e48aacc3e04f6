"""Adversarial daemon answers to the prolog's ``burstd-agent stage-in --job`` (``parse_staging``): each parses or
raises ValueError, never another exception, and an answer that parses names only absolute paths without '..' and
sha256 datasets, for the job that was asked about."""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.agent.stage_job import parse_staging
from burstd.data.manifest import SHA256_HEX

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

path = st.one_of(st.text(max_size=20), st.lists(st.sampled_from(["", "a", "..", ".", "/", "\x00", "b c"]),
                                                max_size=5).map("/".join))
item = st.fixed_dictionaries({"path": st.one_of(path, st.integers(), st.none()),
                              "dataset": st.one_of(st.just("a" * 64), st.text(max_size=70), st.integers())})
answer = st.fixed_dictionaries({
    "job_id": st.one_of(st.sampled_from([5, 5, 6, 0, -1, 2**40]), st.text(max_size=3)),
    "state": st.sampled_from(["done", "queued", "failed", "bogus", 1]),
    "bucket": st.one_of(st.none(), st.sampled_from(["burstd-a", "Bad_B", "", "a" * 70]), st.text(max_size=8)),
    "endpoint": st.one_of(st.none(), st.sampled_from(["http://10.0.0.1:9000", "file:///etc", "http://a b"])),
    "inputs": st.one_of(st.lists(item, max_size=3), st.text(max_size=3)),
})


@FUZZ
@given(st.one_of(answer.map(lambda d: json.dumps(d).encode()), st.binary(max_size=60)))
def test_parse_staging_refuses_or_yields_only_safe_values(raw):
    try:
        staging = parse_staging(raw, 5)
    except ValueError:
        return
    assert staging.job_id == 5
    for i in staging.inputs:
        assert i.path.startswith("/") and ".." not in PurePosixPath(i.path).parts and "\x00" not in i.path
        assert SHA256_HEX.fullmatch(i.dataset)
