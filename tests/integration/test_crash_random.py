"""The local crash storm, second half (the first, and what the storms prove: test_crash.py): one more
launch/terminate chain pair, then SIGKILLs at random instants while launches and terminations are in flight
(inside the provider's calls). A file of its own so pytest-xdist (a file to a worker) runs the halves side by side.
"""

from __future__ import annotations

import random

import pytest

from tests.integration.crash_storm import (  # noqa: F401 (storm: the fixture)
    LOCAL_LAUNCH_CHAINS,
    LOCAL_TERMINATE_CHAINS,
    LocalJobs,
    storm,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]


def test_sigkill_at_chained_points_and_random_instants_of_storms_leaves_one_vm_per_lease(storm, slurm_bed,
                                                                                          bed_user):
    random.seed(6)
    jobs = LocalJobs(storm, slurm_bed, bed_user)
    jobs.chain_pairs(LOCAL_LAUNCH_CHAINS[1:2], LOCAL_TERMINATE_CHAINS[1:2])

    for _ in range(2):  # random instants, inside provider calls
        storm.random_kill(jobs.launch_storm, lo=0.5, hi=3.0)
        storm.wait(storm.settled_up, "up after a random kill")
        storm.check_invariants()
        storm.random_kill(jobs.terminate_storm, lo=0.2, hi=2.0)
        storm.wait(storm.settled_down, "down after a random kill")
        storm.check_invariants()
        storm.daemon.stop()

    summary = storm.summary("local, second half", 0)
    print(f"\n{summary}\nphases (s): {storm.phases}")
    storm.assert_every_point_fired(LOCAL_LAUNCH_CHAINS[1:2] + LOCAL_TERMINATE_CHAINS[1:2], summary)
    # 10 chain steps and 4 random kills; with test_crash.py's 17 at least, the storms' 30 kills
    assert sum(storm.crashes.values()) + storm.random_kills >= 13, summary
