"""decide() work grows linearly (x log) with the queue: counted steps, not wall clock."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from decide_world import world  # noqa: E402

from burstd.policy.decide import DecideStats, decide  # noqa: E402


def work(pending: int, nodes: int) -> tuple[int, DecideStats, int]:
    snap, leases, book, cfg = world(pending, nodes)
    st = DecideStats()
    d = decide(snap, leases, book, None, cfg, stats=st)
    total = st.jobs + st.estimates + st.bisect_steps + st.fit_checks + st.guard_checks
    return total, st, len(d.explanations)


def test_ten_times_the_queue_costs_about_ten_times_the_work():
    small, s1, e1 = work(2_000, 200)
    big, s2, e2 = work(20_000, 2_000)
    assert e1 == 2_000 and e2 == 20_000  # every pending job explained
    assert s2.jobs == 10 * s1.jobs
    assert s2.fit_checks == s1.fit_checks  # fit is cached per job shape: constant in the queue length
    ratio = big / small
    assert 8 <= ratio <= 14, (ratio, s1, s2)  # linear, plus the log factor of the wait-estimate bisection
