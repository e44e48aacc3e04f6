"""The spot trace reader: which values mean alive, and the measured preemption rates it yields."""

import pytest

from burstd.simulate.spot import (
    CPU_TRACES,
    GPU_TRACES,
    PACKAGED_TRACES,
    SINGLE_NODE_READING,
    Reading,
    Segment,
    SpotModel,
    alive_ticks,
    segments_of,
)

SPOT_ROOT = PACKAGED_TRACES  # shipped in the package (burstd/simulate/data/spot/README.md)


def test_single_node_files_are_read_the_authors_way_one_means_preempted():
    assert SINGLE_NODE_READING is Reading.ONE_IS_PREEMPTED
    assert alive_ticks([0, 0, 1, 0]) == [True, True, False, True]


def test_alive_runs_of_zeros_end_in_a_preemption_or_are_censored():
    segs = segments_of([0, 0, 0, 1, 1, 0, 0], 30)
    assert segs == [Segment(90, True), Segment(60, False)]


def test_the_readme_reading_is_still_available_by_name():
    assert segments_of([0, 0, 0, 1, 1, 0, 0], 30, Reading.ONE_IS_ALIVE) == [Segment(60, True)]


def test_multi_node_counts_are_alive_only_with_the_full_gang_by_default():
    # counts of live instances of a 4-node gang: alive at 4, a drop to 3 is a gang preemption
    data = [4, 4, 3, 4, 4, 4, 0, 4]
    assert segments_of(data, 300) == [Segment(600, True), Segment(900, True), Segment(300, False)]


def test_multi_node_counts_with_a_lower_gang_threshold_ride_out_partial_losses():
    data = [4, 4, 3, 4, 4, 4, 0, 4]
    assert segments_of(data, 300, gang_threshold=3) == [Segment(1800, True), Segment(300, False)]


def test_reading_flips_the_rate_of_a_trace():
    data = [0] * 9 + [1] + [0] * 9 + [1]  # preempted twice in 18 alive ticks (authors)
    authors = SpotModel(segments_of(data, 60))
    readme = SpotModel(segments_of(data, 60, Reading.ONE_IS_ALIVE))
    assert authors.rate_per_hour == pytest.approx(2 / (18 * 60 / 3600))
    assert readme.rate_per_hour == pytest.approx(1 / (2 * 60 / 3600))


def test_measured_cpu_rate_matches_the_authors_reading():
    cpu = SpotModel.from_dir(SPOT_ROOT, CPU_TRACES)
    assert cpu.rate_per_hour == pytest.approx(2.60, abs=0.02)  # README's reading gave 0.41


def test_measured_gpu_rate_with_full_gang_multi_node_files():
    gpu = SpotModel.from_dir(SPOT_ROOT, GPU_TRACES)
    # 1-node V100 files (authors' polarity) + 4-node counts at the full gang: 383 preemptions / 1013.6 h
    assert gpu.rate_per_hour == pytest.approx(0.378, abs=0.005)
