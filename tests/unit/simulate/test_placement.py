"""First fit on whole nodes (Starburst's on-prem model) against the engine's fluid pool of units."""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.simulate.engine import SimSetup, Simulator
from burstd.simulate.placement import FirstFit, demands
from burstd.simulate.policies import policy_config
from burstd.simulate.traces import TraceJob

GPU_CFG = parse_config({
    "pools": [{"name": "g", "provider": "local", "partition": "cloud", "node_prefix": "g", "node_count": 100,
               "instance_types": [{"name": "p", "cpus": 64, "memory_mb": 1000, "gpus": 8}], "market": "on-demand",
               "price_per_hour": 8.0}],
    "budget": {"default_account_usd": 1e9},
})


def gj(i, submit, run, gpus):
    return TraceJob(i, submit, run, run, gpus, gpus)


def replay(jobs, placement, nodes=2, depth=100, out_of_order=False):
    setup = SimSetup(policy_config(GPU_CFG, "never"), True, nodes * 8, 8, boot_s=0.0, placement=placement,
                     backfill_depth=depth, decide_enabled=False, out_of_order=out_of_order)
    s = Simulator(setup, jobs, placement)
    s.run()
    return {j.tj.job_id: j for j in s.done}


def test_demands_are_whole_nodes_then_the_remainder():
    assert demands(1, 8) == [1]
    assert demands(8, 8) == [8]
    assert demands(26, 8) == [8, 8, 8, 2]
    with pytest.raises(ValueError, match="at least 1 unit"):
        demands(0, 8)


def test_first_fit_takes_the_lowest_node_with_room_and_gives_it_back():
    ff = FirstFit(3, 8)
    assert ff.place(6) == ((0, 6),)
    assert ff.place(3) == ((1, 3),)  # node 0 has only 2 free
    assert ff.place(2) == ((0, 2),)  # first fit: back to node 0
    assert ff.place(16) is None  # two whole nodes needed, only node 2 is whole
    assert ff.free == [0, 5, 8] and ff.free_total == 13  # a failed placement takes nothing
    assert ff.place(12) == ((2, 8), (1, 4))
    ff.release(((2, 8), (1, 4)))
    assert ff.free == [0, 5, 8] and ff.free_total == 13
    with pytest.raises(ValueError, match="exceed"):
        ff.release(((2, 1),))


def test_fragmentation_makes_a_job_wait_that_the_fluid_pool_starts_at_once():
    # two 6-GPU jobs leave 2 + 2 GPUs free: 4 GPUs free in all, but on no single node
    jobs = [gj(1, 0, 1000, 6), gj(2, 0, 1000, 6), gj(3, 1, 100, 4)]
    fluid = replay(jobs, "fluid")
    ff = replay(jobs, "first-fit")
    assert fluid[3].first_start == 1
    assert ff[3].first_start == 1000  # waits for a node to empty
    assert ff[1].first_start == ff[2].first_start == 0


def test_an_eight_gpu_job_needs_a_whole_node():
    # seven 2-GPU jobs spread over both nodes (first fit: 4 on node 0, 3 on node 1): 2 GPUs free on
    # node 1 and none on node 0, so the 8-GPU job waits for a node to empty completely
    jobs = [gj(i, 0, 500 + 100 * i, 2) for i in range(1, 8)] + [gj(8, 1, 100, 2), gj(9, 2, 100, 8)]
    ff = replay(jobs, "first-fit", depth=0)
    # node 0 holds jobs 1-4 (ends 600..900), node 1 jobs 5-7 and 8 (ends 101, 1000..1200)
    assert ff[9].first_start == 900  # node 0 empties when job 4 ends
    # fluid: any 8 free GPUs will do, free from jobs 8, 1, 2 and 3 once job 3 ends
    assert replay(jobs, "fluid", depth=0)[9].first_start == 800


def test_a_job_bigger_than_a_node_takes_whole_nodes_and_its_remainder_on_one_node():
    # 5 GPUs busy on node 0, 4 on node 1: 15 free, node 2 whole. A 14-GPU job (8 + 6) takes node 2 but
    # finds no node with 6 free, so it waits for node 1 (at 300) where the fluid pool starts it at once
    jobs = [gj(1, 0, 1000, 5), gj(2, 0, 300, 4), gj(3, 1, 100, 14)]
    ff = replay(jobs, "first-fit", nodes=3, depth=0)
    assert ff[3].first_start == 300
    assert replay(jobs, "fluid", nodes=3, depth=0)[3].first_start == 1
    jobs[2] = gj(3, 1, 100, 11)  # 8 + 3: node 2 and node 0's 3 free GPUs
    assert replay(jobs, "first-fit", nodes=3, depth=0)[3].first_start == 1


def test_out_of_order_starts_any_job_that_fits_without_holding_nodes_for_the_head():
    # job 1 holds 6 GPUs of node 0 until 1000; job 2 (16 GPUs) is stuck at the head. EASY backfill keeps
    # the free GPUs for it: job 3 (limit 2000) would delay it and waits; out of order starts job 3 at once
    jobs = [gj(1, 0, 1000, 6), gj(2, 1, 100, 16), TraceJob(3, 2, 2000, 2000, 2, 2)]
    easy = replay(jobs, "first-fit", depth=100)
    assert easy[2].first_start == 1000 and easy[3].first_start == 1100
    strict = replay(jobs, "first-fit", depth=0)
    assert strict[3].first_start == 1100
    ooo = replay(jobs, "first-fit", out_of_order=True)
    assert ooo[3].first_start == 2 and ooo[2].first_start == 2002  # the head now waits for job 3 too


def test_unknown_placement_is_a_clear_error():
    setup = SimSetup(GPU_CFG, True, 16, 8, placement="best-fit", decide_enabled=False)
    with pytest.raises(ValueError, match="unknown placement 'best-fit'"):
        Simulator(setup, [gj(1, 0, 1, 1)])
