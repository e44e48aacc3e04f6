"""``burstctl simulate``: replay a trace through ``decide()`` under each built-in policy.

    burstctl simulate --trace SDSC-BLUE-2000-4.2-cln.swf.gz --limit-jobs 5000 --json
    burstctl simulate --trace philly_trace_rfold.csv.gz --onprem-gpus 1856 --policy burstd --policy never
"""

from __future__ import annotations

from typing import Optional

import typer

from burstd.cli.common import JsonFlag, WideFlag, console, fail, get_config, print_json
from burstd.cli.tables import Column, print_table
from burstd.simulate.limits import NO_LIMITS, UserLimits
from burstd.simulate.policies import MARKETS, POLICIES
from burstd.simulate.placement import PLACEMENTS
from burstd.simulate.settings import BILLING, SETTINGS
from burstd.simulate.traces import FORMATS, TraceError


SIM_COLUMNS = ("cloud_cost_usd", "cost_by_market", "jobs_burst", "wait_mean_s", "wait_p95_s", "delay_mean_s",
               "delay_p95_s", "jct_mean_s", "bounded_slowdown_mean", "preemptions", "lost_node_hours",
               "cost_vs_ondemand_all", "jct_vs_never")
#: dropped first at narrow widths: lowest rank first; cost, JCT and the two ratios always stay
DROP_ORDER = {"cost_by_market": 0, "delay_p95_s": 1, "wait_p95_s": 2, "lost_node_hours": 3,
              "bounded_slowdown_mean": 4, "delay_mean_s": 5, "preemptions": 6, "jobs_burst": 7, "wait_mean_s": 8}


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate(
        trace: str = typer.Option(..., "--trace", help="SWF (.swf[.gz]), Philly CSV, or sacct --parsable2 export"),
        format: Optional[str] = typer.Option(None, "--format", help=f"{'|'.join(FORMATS)} [default: from the name]"),
        onprem_cpus: Optional[int] = typer.Option(None, "--onprem-cpus", min=1,
                                                  help="On-prem CPUs [default: the SWF header's MaxProcs]"),
        onprem_gpus: Optional[int] = typer.Option(None, "--onprem-gpus", min=1,
                                                  help="On-prem GPUs [default: 232 nodes x 8 for Philly]"),
        policy: Optional[list[str]] = typer.Option(None, "--policy",
                                                   help=f"Repeatable; comma lists too [default: all: {', '.join(POLICIES)}]"),
        config: Optional[str] = typer.Option(None, "--config", "-c",
                                             help="burstd.toml whose [[pools]], [policy] and [budget] to simulate "
                                                  "[default: a built-in site for the trace kind]"),
        limit_jobs: Optional[int] = typer.Option(None, "--limit-jobs", min=1, help="Replay only the first N jobs"),
        plot: Optional[str] = typer.Option(None, "--plot", help="Write the cost-versus-mean-JCT frontier as PNG here"),
        seed: int = typer.Option(1, "--seed", help="Seed for spot preemption draws (same for every policy)"),
        boot_s: Optional[float] = typer.Option(
            None, "--boot-s", min=0, help="Cloud node boot delay, seconds [default: 120; the setting's]"),
        cycle_s: float = typer.Option(120.0, "--cycle-s", min=1, help="Seconds between decide() cycles"),
        spot_traces: Optional[str] = typer.Option(
            None, "--spot-traces", help="Folder of measured spot preemption traces (skypilot spot-traces layout) "
                                        "[env: BURSTD_SPOT_TRACES; default: the traces shipped with burstd]"),
        market: Optional[str] = typer.Option(None, "--market",
                                             help="on-demand|spot: every pool on this one market (ondemand-all "
                                                  "stays the on-demand reference) [default: as configured]"),
        checkpoint_share: Optional[float] = typer.Option(
            None, "--checkpoint-share", min=0.0, max=1.0,
            help="Share of jobs that checkpoint; the rest restart from zero when preempted [default: 0.5]"),
        checkpoint_interval_s: Optional[float] = typer.Option(
            None, "--checkpoint-interval-s", min=1.0,
            help="Seconds between checkpoints [default: policy.checkpoint_interval_s, 3600]"),
        setting: Optional[str] = typer.Option(
            None, "--setting", help=f"{'|'.join(SETTINGS)}: a named group of the options below (docs/policy.md, "
                                    "\"Reproducing Starburst\"); options given explicitly override it"),
        placement: Optional[str] = typer.Option(
            None, "--placement", help=f"{'|'.join(PLACEMENTS)}: on-prem as one pool of units, or first fit on "
                                      "whole nodes [default: fluid; the setting's]"),
        backfill_depth: Optional[int] = typer.Option(
            None, "--backfill-depth", min=0, help="Queued jobs EASY backfill looks at; 0 = strict FIFO "
                                                  "[default: 100; the setting's]"),
        out_of_order: bool = typer.Option(
            False, "--out-of-order", help="On-prem: any queued job that fits starts, in queue order, none held "
                                          "back for the head (Starburst's 'loop'); replaces backfill"),
        bill_per: Optional[str] = typer.Option(
            None, "--bill-per", help="node-hour|gpu-hour: gpu-hour bursts a GPU job as one-GPU nodes, so it is "
                                     "billed, and compute-wait waits, per GPU-hour "
                                     "[default: node-hour; the setting's]"),
        warmup_jobs: Optional[int] = typer.Option(
            None, "--warmup-jobs", min=0, help="Leave the first and the last N jobs out of the metrics "
                                               "[default: 0; the setting's]"),
        workers: int = typer.Option(1, "--workers", min=1, help="Policies simulated in parallel processes"),
        data_median_gb: Optional[float] = typer.Option(
            None, "--data-median-gb", min=0, help="Replay with the data-size model: each job reads a log-normal "
                                                  "input of this median size, half of them shared datasets "
                                                  "(docs/policy.md) [default: no data]"),
        calibrate: bool = typer.Option(
            False, "--calibrate", help="Replay with no bursting and compare each job's modelled wait with the "
                                       "wait the trace recorded (how far the on-prem model is from the site)"),
        bound: bool = typer.Option(
            False, "--bound", help="Beside each policy, a hindsight lower bound on cloud cost at its mean JCT "
                                   "(whole jobs to the cloud, relaxed on-prem; minutes for a few thousand jobs: "
                                   "use --limit-jobs)"),
        hindsight: bool = typer.Option(
            False, "--hindsight", help="Beside each policy, the cheapest plan found in hindsight (which jobs burst, "
                                       "on-demand) that reaches its mean JCT under the site's own scheduler: with "
                                       "--bound, the optimum lies between the two"),
        hindsight_time_s: float = typer.Option(
            60.0, "--hindsight-time-s", min=1, help="With --hindsight: seconds of search a policy"),
        sched_pass_s: float = typer.Option(
            0.0, "--sched-pass-s", min=0, help="With --calibrate: the on-prem scheduler runs in passes this many "
                                               "seconds apart (0: at every event)"),
        user_max_running_jobs: int = typer.Option(
            0, "--user-max-running-jobs", min=0, help="On-prem: a user runs at most this many jobs at once; the "
                                                      "rest of that user's jobs wait, CPUs free or not (Maui's "
                                                      "MAXJOB per user; 0: no limit)"),
        user_max_running_cpus: int = typer.Option(
            0, "--user-max-running-cpus", min=0, help="On-prem: a user holds at most this many CPUs (GPUs on a GPU "
                                                      "replay) at once (Maui's MAXPROC per user; 0: no limit)"),
        queue_priority: Optional[str] = typer.Option(
            None, "--queue-priority", help="On-prem: the queues (SWF field 15) as priority classes, the queue in "
                                           "class order then submit order: 'auto' (from the SWF header's queue "
                                           "names) or queue numbers, highest class first, e.g. 0,1,2 "
                                           "[default: none, submit order]"),
        bound_time_s: float = typer.Option(
            60.0, "--bound-time-s", min=0, help="With --bound: seconds of branch and bound a policy for whole jobs "
                                                "to the cloud (its proven bound stands when time runs out; "
                                                "0: the LP relaxation alone)"),
        as_json: bool = JsonFlag,
        wide: bool = WideFlag,
    ) -> None:
        """Replay a job trace through decide() and compare cost, wait and slowdown per policy."""
        from burstd.simulate.report import plot_frontier, simulate_trace

        if onprem_cpus is not None and onprem_gpus is not None:
            fail("give --onprem-cpus or --onprem-gpus, not both")
        names: list[str] = []
        for p in policy or []:
            names.extend(x.strip() for x in p.split(",") if x.strip())
        unknown = [n for n in names if n not in POLICIES]
        if unknown:
            fail(f"unknown policy {', '.join(unknown)}; built-in: {', '.join(POLICIES)}")
        if market is not None and market not in MARKETS:
            fail(f"unknown market {market!r}; known: {', '.join(MARKETS)}")
        if setting is not None and setting not in SETTINGS:
            fail(f"unknown setting {setting!r}; known: {', '.join(SETTINGS)}")
        if placement is not None and placement not in PLACEMENTS:
            fail(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
        if bill_per is not None and bill_per not in BILLING:
            fail(f"unknown --bill-per {bill_per!r}; known: {', '.join(BILLING)}")
        if format is not None and format not in FORMATS:
            fail(f"unknown trace format {format!r}; known: {', '.join(FORMATS)}")
        limits = UserLimits(user_max_running_jobs, user_max_running_cpus)
        if calibrate:
            _calibrate(trace, format, onprem_cpus, limit_jobs, placement, backfill_depth, out_of_order, as_json,
                       sched_pass_s, limits, queue_priority)
            return
        cfg = get_config(config) if config else None
        from pathlib import Path

        root = Path(spot_traces) if spot_traces else None
        if root is not None and not root.is_dir():
            fail(f"--spot-traces {spot_traces}: not a folder")
        try:
            report = simulate_trace(trace, format=format, policies=names or None, onprem_cpus=onprem_cpus,
                                    onprem_gpus=onprem_gpus, config=cfg, limit_jobs=limit_jobs, seed=seed,
                                    boot_s=boot_s, cycle_s=cycle_s, workers=workers, spot_root=root,
                                    market=market, checkpoint_share=checkpoint_share,
                                    checkpoint_s=checkpoint_interval_s, setting=setting, placement=placement,
                                    backfill_depth=backfill_depth, bill_per=bill_per, warmup_jobs=warmup_jobs,
                                    out_of_order=out_of_order, data_median_gb=data_median_gb,
                                    config_path=config, bound=bound, bound_time_s=bound_time_s,
                                    hindsight_time_s=hindsight_time_s if hindsight else None,
                                    user_limits=limits, queue_priority=queue_priority)
        except (TraceError, ValueError) as exc:
            fail(str(exc))
        if plot:
            report["plot"] = str(plot_frontier(report, plot))
        if as_json:
            print_json(report)
            return
        # plain text: a trace's path, a config's [sections] and reasons are not rich markup
        def say(text: str) -> None:
            console.print(text, markup=False, highlight=False)

        title = (f"{report['trace']}: {report['jobs_read']} jobs, {report['onprem_units']} on-prem "
                 f"{report['units']}, spot preemptions {report.get('spot_preemption_rate_per_node_hour', 0.0)}"
                 "/node-h")
        # at 80 columns the cost and JCT columns stay; the rest go, the least telling first (--wide: all)
        cols = [Column("policy")] + [Column(c.replace("_", " "), drop=DROP_ORDER.get(c), justify="right")
                                     for c in SIM_COLUMNS]
        print_table(console, title, cols, [[name, *(_cell(row.get(c, "")) for c in SIM_COLUMNS)]
                                           for name, row in report["policies"].items()], wide=wide)
        say(f"replays: {report['site']}")
        for line in report["assumptions"]:
            say(f"  assumed {line}")
        say("wait = to the final start; delay = JCT minus run time; on the cost vs mean JCT frontier: "
                      + ", ".join(report["frontier"]))
        shapes = ", ".join(f"{n} ({v['cpus']} CPUs, {v['gpus']} GPUs)" for n, v in report["cloud_shapes"].items())
        say(f"checkpointing: {report['checkpoint_share']:.0%} of jobs, every "
                      f"{report['checkpoint_interval_s']:.0f} s; spot preemptions drawn from {report['spot_traces']}")
        order = "out of order" if report["out_of_order"] else f"backfill depth {report['backfill_depth']}"
        say(f"on-prem: {report['onprem_units_per_node']} {report['units']} a node, placement "
                      f"{report['placement']}, {order}; cloud: {shapes}, billed per {report['billing']}, "
                      f"boot {report['boot_s']:.0f} s; market {report['market']}")
        if report["warmup_jobs"]:
            say(f"metrics leave out the first and the last {report['warmup_jobs']} jobs "
                          f"(setting: {report['setting'] or 'none'})")
        for name, row in report["policies"].items():
            for why, n in row.get("cannot_burst", {}).items():
                say(f"{name}: {n} jobs could not burst: {why}")
        for name, row in report["policies"].items():
            if "data" in row:
                d = row["data"]
                say(f"{name}: data {d['gb_in']} GB moved in, ${d['usd']:,.2f}, {d['cache_hits']} cache "
                              f"hits, {d['jobs_kept_home_for_data']} jobs kept home for their data")
        if report["too_big_for_onprem"]:
            say(f"{report['too_big_for_onprem']} jobs larger than the on-prem site were left out")
        if bound:
            b = report["bound"]
            say(f"hindsight lower bound on cloud cost at each policy's mean JCT ({b['method']}; "
                          f"slots of {b['slot_s']:g} s): " + ", ".join(
                              f"{name} ${row['bound_usd']}" for name, row in report["policies"].items()))
        if hindsight:
            say("cheapest plan found in hindsight under the site's own scheduler, at each policy's mean "
                          "JCT" + (" (the optimum lies between the bound and this)" if bound else "") + ": " +
                          ", ".join(f"{name} ${row['hindsight_usd']}" for name, row in report["policies"].items()))
            if "caveat" in report["hindsight"]:
                say(f"hindsight: {report['hindsight']['caveat']}")
        if plot:
            say(f"frontier plot: {report['plot']}")


def _calibrate(trace: str, format: str | None, onprem_cpus: int | None, limit_jobs: int | None,
               placement: str | None, backfill_depth: int | None, out_of_order: bool, as_json: bool,
               sched_pass_s: float = 0.0, limits: UserLimits = NO_LIMITS,
               queue_priority: str | None = None) -> None:
    from burstd.simulate.calibrate import calibrate_trace

    try:
        rep = calibrate_trace(trace, format=format, onprem_cpus=onprem_cpus, limit_jobs=limit_jobs,
                              placement=placement or "fluid",
                              backfill_depth=100 if backfill_depth is None else backfill_depth,
                              out_of_order=out_of_order, sched_pass_s=sched_pass_s, user_limits=limits,
                              queue_priority=queue_priority)
    except (TraceError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        print_json(rep)
        return
    title = (f"{rep['trace']}: the never-burst replay against the waits the trace recorded ({rep['jobs_compared']} "
             f"jobs; {rep['onprem_units']} CPUs, {rep['onprem_units_per_node']} a node, {rep['placement']}, "
             f"backfill depth {rep['backfill_depth']}{_limits_text(limits)}"
             f"{'; queue classes ' + rep['queue_priority'] if rep['queue_priority'] else ''})")
    print_table(console, title, [Column(""), Column("recorded", justify="right"), Column("model", justify="right")],
                [["mean wait (s)", str(rep["recorded_mean_wait_s"]), str(rep["model_mean_wait_s"])],
                 ["median wait (s)", str(rep["recorded_median_wait_s"]), str(rep["model_median_wait_s"])]], wide=True)
    console.print(f"model / recorded mean: {rep['mean_ratio']}; median |error| / recorded: "
                  f"{rep['median_abs_rel_error']}; jobs within 2x: {rep['share_within_2x']:.0%} "
                  f"(waits under {rep['wait_floor_s']:.0f} s count as {rep['wait_floor_s']:.0f} s)")
    st = rep["recorded_stalls"]
    console.print(f"the record stalls {st['count']} times ({st['days']} of {st['trace_days']} days: nothing started "
                  f"for {st['min_s'] / 3600:.0f} h or more while jobs waited and under half the CPUs were busy); "
                  f"{st['share_of_jobs_waiting_across']:.1%} of the jobs waited across one, "
                  f"{st['share_of_recorded_wait_across']:.0%} of all the recorded wait")


def _limits_text(limits: UserLimits) -> str:
    return f", at most {limits.caps()} a user" if limits.active else ""


def _cell(v) -> str:
    if isinstance(v, dict):  # cost by market
        return " ".join(f"{k}:{x}" for k, x in sorted(v.items())) or "-"
    return str(v)
