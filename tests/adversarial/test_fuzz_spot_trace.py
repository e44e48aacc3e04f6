"""The spot availability reader (``burstd.simulate.spot.availability_of``, the Can't-Be-Late bench's input):
hostile JSON gives availability or a ValueError naming the file, never another exception."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.simulate.spot import availability_of

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(), st.text(max_size=5))
value = st.recursive(scalar, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                    st.dictionaries(st.text(max_size=12), kids, max_size=3)),
                     max_leaves=10)
plausible = st.fixed_dictionaries({
    "metadata": st.one_of(value, st.fixed_dictionaries({"gap_seconds": value})),
    "data": st.one_of(value, st.lists(st.one_of(st.integers(-2, 20), scalar), max_size=20)),
})


@FUZZ
@given(st.one_of(value, plausible))
def test_hostile_trace_json_reads_or_names_the_file(doc):
    try:
        ticks, gap = availability_of(doc, "t.json")
    except ValueError as exc:
        assert str(exc).startswith("t.json: ")
        return
    assert gap > 0 and all(isinstance(v, bool) for v in ticks)
    assert len(ticks) == len(doc["data"])
