"""The discrete-event model: on-prem FCFS + EASY backfill, cloud boot/billing, spot preemption and escalation."""

from __future__ import annotations

import pytest

from burstd.config import parse_config
from burstd.simulate.engine import SimSetup, Simulator
from burstd.simulate.policies import policy_config
from burstd.simulate.spot import Reading, Segment, SpotModel, segments_of
from burstd.simulate.traces import TraceJob

CFG = parse_config({
    "pools": [{"name": "cpu", "provider": "local", "partition": "cloud", "node_prefix": "c", "node_count": 100,
               "instance_types": [{"name": "t", "cpus": 8, "memory_mb": 1000}], "market": "spot",
               "price_per_hour": 1.0, "ondemand_price_per_hour": 2.0}],
    "budget": {"default_account_usd": 1e9},
    "policy": {"boot_overhead_s": 0, "waiting": {"min_wait_s": 0}},
})


def tj(i, submit, run, cpus, limit=None):
    return TraceJob(i, submit, run, limit or run, cpus)


def sim(jobs, policy="never", spot=None, units=8, boot=100.0, ckpt=600.0, ondemand=2.0):
    base = CFG.model_copy(update={"pools": [CFG.pools[0].model_copy(update={"ondemand_price_per_hour": ondemand})]})
    cfg = policy_config(base, policy)
    setup = SimSetup(cfg, False, units, 8, boot_s=boot, cycle_s=60.0, spot=spot, checkpoint_s=ckpt,
                     decide_enabled=(policy != "never"))
    s = Simulator(setup, jobs, policy)
    res = s.run()
    return res, {j.tj.job_id: j for j in s.done}


def test_fcfs_with_easy_backfill_trusts_time_limits():
    jobs = [tj(1, 0, 1000, 6), tj(2, 1, 100, 8), tj(3, 2, 400, 2, limit=500), tj(4, 3, 100, 2, limit=2000)]
    res, done = sim(jobs)
    assert done[1].first_start == 0
    assert done[3].first_start == 2  # backfilled: ends (by its limit) before job 2 can start
    assert done[2].first_start == 1000  # the head starts when job 1 ends
    assert done[4].first_start == 1100  # would delay the head: waits
    assert res.jobs == 4 and res.cloud_cost_usd == 0
    assert res.wait_mean_s == pytest.approx((0 + 999 + 0 + 1097) / 4)


def test_ondemand_all_bursts_queued_jobs_at_the_next_cycle_and_bills_boot_plus_run():
    jobs = [tj(1, 0, 3600, 8), tj(2, 10, 3600, 16)]
    res, done = sim(jobs, "ondemand-all")
    assert not done[1].burst and done[2].burst
    assert done[2].first_start == 60 + 100  # next cycle, then boot
    assert res.cloud_cost_usd == pytest.approx(2 * 2.0 * (3600 + 100) / 3600)
    assert res.jobs_burst == 1 and res.cost_by_market == {"on-demand": pytest.approx(res.cloud_cost_usd)}


def test_spot_preemption_loses_work_since_checkpoint_and_escalates_to_on_demand():
    every_1000s = SpotModel([Segment(1000.0, True)] * 10, seed=3)
    jobs = [tj(0, 0, 90000, 8), tj(1, 0, 36000, 8), tj(2, 0, 3000, 8)]  # job 0 holds on-prem
    # on-demand is 50x spot, so spot wins despite the risk until escalation forces on-demand
    res, done = sim(jobs, "constant-wait", spot=every_1000s, ondemand=50.0)
    # each spot life is < 1000 s (< boot + run): every spot attempt is preempted
    assert res.preemptions == 4  # two per job, then max_preemptions_spot (2) sends both on-demand
    assert done[1].restarts == done[2].restarts == 2 and done[0].restarts == 0
    assert 0 < res.lost_node_hours <= 4 * 600 / 3600  # work since the last 600 s checkpoint, < 900 s of run
    for j in (done[1], done[2]):
        assert (j.tj.runtime - j.remaining) % 600 == 0  # only checkpointed progress is kept
    assert set(res.cost_by_market) == {"spot", "on-demand"}


def test_same_seed_same_result_and_jobs_never_lost():
    every = SpotModel([Segment(700.0, True), Segment(5000.0, True), Segment(100.0, False)], seed=1)
    jobs = [tj(i, i * 30, 1000 + 100 * (i % 7), 8 * (1 + i % 3)) for i in range(60)]
    a, done_a = sim(jobs, "spot-all", spot=every, units=24)
    b, _ = sim(jobs, "spot-all", spot=SpotModel(every.segments, seed=1), units=24)
    assert a.as_dict() | {"wall_s": 0, "cpu_s": 0} == b.as_dict() | {"wall_s": 0, "cpu_s": 0}
    assert sorted(done_a) == [j.job_id for j in jobs]  # every job finishes exactly once


def test_segments_from_a_measured_style_trace():
    segs = segments_of([0, 1, 1, 1, 0, 0, 1, 1], 30, Reading.ONE_IS_ALIVE)  # the README's reading
    assert segs == [Segment(90, True), Segment(60, False)]
    m = SpotModel(segs, seed=1)
    assert m.rate_per_hour == pytest.approx(1 / (150 / 3600))
    assert all(0 < m.draw() <= 150 + 90 * 10_000 for _ in range(50))


def test_a_job_that_can_never_run_ends_the_replay_instead_of_hanging():
    always = SpotModel([Segment(50.0, True)], seed=1)
    res, done = sim([tj(1, 0, 3600, 16)], "spot-all", spot=always)  # 16 CPUs > 8 on-prem; spot always fails
    assert res.unfinished == 1 and res.jobs == 0 and res.preemptions == 2


class Scripted(SpotModel):
    """Spot lives given in order, then never preempted."""

    def __init__(self, *lives: float):
        super().__init__([Segment(1000.0, True)])
        self.lives = list(lives)

    def draw(self) -> float:
        return self.lives.pop(0) if self.lives else float("inf")


def test_wait_is_measured_to_the_final_start_so_a_preempted_spot_start_is_not_no_wait():
    # one spot life of 500 s, then calm: the first spot start (at 60 + 100 s) is preempted at 560 s
    once = Scripted(500.0)
    jobs = [tj(1, 0, 3600, 16)]  # 16 CPUs > 8 on-prem: can only run in the cloud
    res, done = sim(jobs, "spot-all", spot=once, ckpt=10_000.0)
    j = done[1]
    assert res.preemptions >= 1 and j.first_start == 160
    assert j.last_start > j.first_start
    assert res.first_wait_mean_s == 160
    assert res.wait_mean_s == j.last_start  # submitted at 0
    assert res.wait_mean_s > res.first_wait_mean_s


def test_delay_is_jct_minus_run_time_and_counts_lost_work():
    once = Scripted(500.0)
    res, done = sim([tj(1, 0, 3600, 16)], "spot-all", spot=once, ckpt=10_000.0)
    j = done[1]
    assert res.jct_mean_s == j.end
    assert res.delay_mean_s == pytest.approx(j.end - 3600)
    # at least: one cycle + boot before the first start, the 400 s of lost work, another boot
    assert res.delay_mean_s >= 60 + 100 + 400 + 100
    assert res.delay_p95_s == pytest.approx(res.delay_mean_s)


def test_without_preemptions_final_and_first_start_waits_agree():
    jobs = [tj(1, 0, 1000, 6), tj(2, 1, 100, 8)]
    res, done = sim(jobs)
    assert res.wait_mean_s == res.first_wait_mean_s == pytest.approx(999 / 2)
    assert res.delay_mean_s == pytest.approx(res.wait_mean_s)  # on-prem, no boot: delay is the wait


def sim_ckpt(share, lives):
    cfg = policy_config(CFG, "spot-all")
    setup = SimSetup(cfg, False, 8, 8, boot_s=100.0, cycle_s=60.0, spot=Scripted(*lives), checkpoint_s=600.0,
                     checkpoint_share=share)
    return Simulator(setup, [tj(1, 0, 3600, 16)], "spot-all").run()


def test_a_job_that_does_not_checkpoint_loses_all_its_progress_when_preempted():
    # preempted 2000 s after launch: 1900 s of progress, 1800 s of it checkpointed (600 s interval)
    never = sim_ckpt(0.0, [2000.0])
    always = sim_ckpt(1.0, [2000.0])
    assert never.lost_node_hours == pytest.approx(2 * 1900 / 3600)  # 2 nodes x all progress
    assert always.lost_node_hours == pytest.approx(2 * 100 / 3600)  # 2 nodes x since the last checkpoint
    assert never.delay_mean_s > always.delay_mean_s


def test_the_checkpointing_share_picks_that_share_of_jobs_the_same_way_every_time():
    from burstd.simulate.engine import checkpoints

    picked = [checkpoints(i, 0.3) for i in range(1, 10_001)]
    assert sum(picked) == pytest.approx(3000, abs=30)
    assert picked == [checkpoints(i, 0.3) for i in range(1, 10_001)]
    assert not any(checkpoints(i, 0.0) for i in range(100)) and all(checkpoints(i, 1.0) for i in range(100))


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("believed_s, share, restarts, markets", [
    (60.0, 1.0, 4, {"spot"}), (60.0, 0.0, 4, {"spot"}),  # what the job really kept does not enter decide()
    (3600.0, 1.0, 1, {"spot", "on-demand"}), (3600.0, 0.0, 1, {"spot", "on-demand"})])
def test_burstd_keeps_a_job_on_spot_while_the_work_it_is_believed_to_keep_keeps_it_on_the_uniform_line(
        believed_s, share, restarts, markets, seed):
    """The engine tells decide() what the daemon would: each requeued job kept the whole
    ``policy.checkpoint_interval_s`` of its runs (each under 3,000 s here), whether or not the replay's job really
    checkpoints. Believed every 60 s, it keeps within a boot and a restart (2 x 300 s) of its line (deadline
    submit + 2 x limit: slack 2) and stays on spot until max_preemptions_total (4) sends it home; believed
    hourly, it kept nothing, is behind after its first preemption and goes on-demand."""
    spot = SpotModel([Segment(3000.0, True)] * 10, seed=seed)
    base = CFG.model_copy(update={"pools": [CFG.pools[0].model_copy(update={"ondemand_price_per_hour": 50.0})],
                                  "policy": CFG.policy.model_copy(update={
                                      "boot_overhead_s": 300.0, "progress_slack": 2.0,
                                      "checkpoint_interval_s": believed_s})})
    setup = SimSetup(policy_config(base, "burstd"), False, 8, 8, boot_s=100.0, cycle_s=60.0, spot=spot,
                     checkpoint_s=60.0, checkpoint_share=share)
    s = Simulator(setup, [tj(0, 0, 90000, 8), tj(1, 0, 36000, 8)], "burstd")  # job 0 holds on-prem for 25 h
    res = s.run()
    done = {j.tj.job_id: j for j in s.done}
    assert done[1].restarts == restarts
    assert set(res.cost_by_market) == markets
    # the job's real loss still follows whether it really checkpoints (every 60 s, or never)
    if share == 1.0:
        assert 0 < res.lost_node_hours <= restarts * 60 / 3600
    else:
        assert res.lost_node_hours > 0
