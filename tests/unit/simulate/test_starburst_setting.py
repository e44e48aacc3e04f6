"""Starburst's setting: GPU-hour billing and wait, warm-up jobs left out, the preset, end to end."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import YEAR_S, parse_config
from burstd.simulate.engine import SimSetup, Simulator
from burstd.simulate.policies import policy_config
from burstd.simulate.settings import STARBURST, get_setting
from burstd.simulate.spot import GPU_TRACES
from burstd.simulate.traces import TraceJob


def calm_spot_traces(root):
    """Spot traces in the skypilot layout that never preempt (0 = alive in the authors' reading)."""
    for sub in GPU_TRACES:
        (root / sub).mkdir(parents=True)
        (root / sub / "z.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [0] * 100}))
    return root

SITE = {
    "pools": [{"name": "v", "provider": "local", "partition": "cloud", "node_prefix": "v", "node_count": 1000,
               "instance_types": [{"name": "p", "cpus": 64, "memory_mb": 1000, "gpus": 8}],
               "market": "on-demand", "price_per_hour": 24.0}],
    "budget": {"default_account_usd": 1e9},
    "policy": {"waiting": {"min_wait_s": 0, "wait_per_node_hour_s": 100.0, "max_wait_s": YEAR_S}},
}
SLICES = {**SITE, "pools": [{**SITE["pools"][0], "instance_types": [
    {"name": "p1", "cpus": 8, "memory_mb": 1000, "gpus": 1}], "price_per_hour": 3.0}]}


def gj(i, submit, run, gpus):
    return TraceJob(i, submit, run, run, gpus, gpus)


def replay(jobs, policy, site, slices, warmup=0, units=8):
    setup = SimSetup(policy_config(parse_config(site, "t"), policy), True, units, 8, cpus_per_gpu=1, boot_s=0.0,
                     cycle_s=10.0, gpu_slices=slices, warmup_jobs=warmup, decide_enabled=(policy != "never"))
    s = Simulator(setup, jobs, policy)
    return s.run(), {j.tj.job_id: j for j in s.done}


def test_gpu_hour_billing_charges_gpus_times_hours_not_nodes():
    jobs = [gj(1, 0, 7200, 8), gj(2, 1, 3600, 2)]  # job 1 fills on-prem, job 2 (2 GPUs, 1 h) bursts
    res, done = replay(jobs, "ondemand-all", SLICES, slices=True)
    assert done[2].burst and done[2].nodes == 2  # two one-GPU nodes
    assert res.cloud_cost_usd == pytest.approx(2 * 1.0 * 3.0)  # GPUs x hours x price per GPU-hour
    # per node-hour the same job pays a whole 8-GPU node
    res, _ = replay(jobs, "ondemand-all", SITE, slices=False)
    assert res.cloud_cost_usd == pytest.approx(1 * 1.0 * 24.0)


def test_compute_wait_waits_per_gpu_hour_with_gpu_slices():
    # 100 s per node-hour: a 4-GPU, 1-hour job waits 400 s as one-GPU nodes, 100 s as one node
    jobs = [gj(1, 0, 20000, 8), gj(2, 5, 3600, 4)]
    _, done = replay(jobs, "compute-wait", SLICES, slices=True)
    assert done[2].burst and done[2].first_start == 410  # 5 + 400 s, at the next 10 s cycle
    _, done = replay(jobs, "compute-wait", SITE, slices=False)
    assert done[2].burst and done[2].first_start == 110


def test_warmup_jobs_are_left_out_of_every_metric_and_of_the_cost():
    # ten 1-hour jobs, one at a time on 8 GPUs; job 0 arrives while the site is full and bursts
    jobs = [gj(100, 0, 36000, 8)] + [gj(i, 100 + 3600 * i, 1800, 1) for i in range(9)]
    jobs[1] = gj(0, 50, 3600, 8)  # the second arrival bursts too
    all_, _ = replay(jobs, "ondemand-all", SLICES, slices=True)
    cut, _ = replay(jobs, "ondemand-all", SLICES, slices=True, warmup=2)
    assert all_.jobs == 10 and all_.jobs_burst == 9 and all_.cloud_cost_usd > 0
    # Starburst's cut keeps positions w .. n - w by arrival order: 2..8 of 0..9
    assert cut.jobs == 7 and cut.warmup_jobs == 2
    assert cut.jobs_burst == 7
    burst_gpu_h = sum(8 * 1 if j.job_id == 0 else 0.5 for j in jobs[1:])  # what the full run paid
    assert all_.cloud_cost_usd == pytest.approx(burst_gpu_h * 3.0)
    assert cut.cloud_cost_usd == pytest.approx(7 * 0.5 * 3.0)  # jobs 2..8 only, not job 0's 8 GPU-hours
    assert cut.cost_by_market == {"on-demand": pytest.approx(cut.cloud_cost_usd)}
    assert cut.jct_mean_s == pytest.approx(1800 + 10 - (100 + 3600 * 1) % 10)  # every measured job burst


def test_the_starburst_preset_holds_its_simulators_parameters():
    s = get_setting("starburst")
    assert s is STARBURST
    assert (s.placement, s.backfill_depth, s.gpu_slices, s.warmup_jobs) == ("first-fit", 0, True, 5000)
    assert (s.boot_s, s.market, s.onprem_gpus, s.gpus_per_node) == (0.0, "on-demand", 1856, 8)
    assert s.constant_wait_s == 3600.0  # constant-1: one hour
    cfg = s.config()
    w = cfg.policy.waiting
    assert w.wait_per_node_hour_s == pytest.approx(0.076 * 3600)  # beta 0.076 h per GPU-hour
    assert w.min_wait_s == 0 and w.max_wait_s == YEAR_S  # no floor, no cap
    (pool,) = cfg.pools
    assert pool.gpus == 1 and pool.ondemand_price_per_hour == 3.06  # priced per GPU-hour
    with pytest.raises(ValueError, match="unknown setting 'slurm'"):
        get_setting("slurm")


PHILLY = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n" + "".join(
    f"{i},{i * 300.0},CLOS,1,{(1, 2, 4, 8, 16)[i % 5]},{3600.0 + 900 * (i % 7)}\n" for i in range(60))


def run_cli(tmp_path, *extra):
    tmp_path.mkdir(exist_ok=True)
    trace = tmp_path / "philly_small.csv"
    trace.write_text(PHILLY)
    args = ["simulate", "--trace", str(trace), "--json", "--spot-traces", str(calm_spot_traces(tmp_path / "s")),
            *extra]
    return CliRunner().invoke(app, args)


def test_the_setting_runs_end_to_end_on_a_small_philly_slice(tmp_path):
    r = run_cli(tmp_path, "--setting", "starburst", "--onprem-gpus", "16", "--warmup-jobs", "5",
                "--policy", "ondemand-all,compute-wait,constant-wait,burstd")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert (rep["setting"], rep["placement"], rep["backfill_depth"], rep["billing"]) == (
        "starburst", "first-fit", 0, "gpu-hour")
    assert (rep["boot_s"], rep["market"], rep["warmup_jobs"], rep["onprem_units"]) == (0.0, "on-demand", 5, 16)
    assert rep["cloud_shapes"] == {"aws-v100": {"cpus": 8, "gpus": 1, "spot": 0.918, "on-demand": 3.06}}
    rows = rep["policies"]
    for row in rows.values():
        assert row["jobs"] == 60 - 2 * 5 + 1 and row["cannot_burst"] == {}
        assert set(row["cost_by_market"]) <= {"on-demand"}
    nw, cw = rows["ondemand-all"], rows["compute-wait"]
    assert 0 < cw["cloud_cost_usd"] < nw["cloud_cost_usd"] and cw["jct_mean_s"] >= nw["jct_mean_s"]


def test_explicit_options_override_the_setting(tmp_path):
    r = run_cli(tmp_path, "--setting", "starburst", "--onprem-gpus", "16", "--warmup-jobs", "0",
                "--boot-s", "60", "--placement", "fluid", "--bill-per", "node-hour", "--backfill-depth", "7",
                "--policy", "compute-wait")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert (rep["boot_s"], rep["placement"], rep["billing"], rep["backfill_depth"]) == (
        60.0, "fluid", "node-hour", 7)
    assert rep["policies"]["compute-wait"]["jobs"] == 60
    assert rep["out_of_order"] is False
    r = run_cli(tmp_path / "o", "--setting", "starburst", "--onprem-gpus", "16", "--warmup-jobs", "5",
                "--out-of-order", "--policy", "compute-wait")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["out_of_order"] is True


@pytest.mark.parametrize("extra, message", [
    (("--setting", "starburst"), "--warmup-jobs 5000 leaves out 10000 of the 60 jobs"),
    (("--setting", "slurm"), "unknown setting 'slurm'"),
    (("--placement", "best-fit"), "unknown placement 'best-fit'"),
    (("--bill-per", "core-hour"), "unknown --bill-per 'core-hour'"),
    (("--setting", "starburst", "--onprem-cpus", "64", "--warmup-jobs", "1"), "not --onprem-cpus"),
])
def test_bad_setting_input_is_a_clear_error(tmp_path, extra, message):
    r = run_cli(tmp_path, *extra)
    assert r.exit_code != 0
    assert message in r.output


def test_the_setting_refuses_a_config_and_a_cpu_trace(tmp_path):
    conf = tmp_path / "burstd.toml"
    conf.write_text("")
    r = run_cli(tmp_path, "--setting", "starburst", "--warmup-jobs", "1", "-c", str(conf))
    assert r.exit_code != 0
    swf = tmp_path / "site.swf"
    swf.write_text("; MaxProcs: 8\n; MaxNodes: 1\n" + "".join(
        f"{i} {i * 60} 0 600 1 -1 -1 -1 600 -1 1 1 1 -1 1 -1 -1 -1\n" for i in range(1, 20)))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(swf), "--setting", "starburst", "--warmup-jobs", "1",
                                 "--spot-traces", str(calm_spot_traces(tmp_path / "s2"))])
    assert r.exit_code != 0 and "no job in the trace asks for GPUs" in r.output
    # a sacct export with a GPU job, replayed on CPUs, cannot be billed per GPU-hour
    sacct = tmp_path / "site.sacct"
    head = "JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|NCPUS|NNodes|AllocTRES|State\n"
    t = "2024-01-01T0{h}:0{i}:00"
    sacct.write_text(head + "".join(f"{i}|u|a|batch|{t.format(h=0, i=i)}|{t.format(h=0, i=i)}|{t.format(h=1, i=i)}|"
                                    f"01:00:00|02:00:00|4|1|cpu=4,gres/gpu=1|COMPLETED\n" for i in range(1, 6)))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(sacct), "--bill-per", "gpu-hour", "--onprem-cpus", "8",
                                 "--spot-traces", str(calm_spot_traces(tmp_path / "s3"))])
    assert r.exit_code != 0 and "needs a GPU replay" in r.output, r.output
