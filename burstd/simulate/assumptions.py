"""What a replay assumed, in words, for the header of ``burstctl simulate`` (and its ``--json``).

``--config FILE`` replays what that daemon would do; everything the trace or the file does not say (the
site's size, its node shape, the spot market, time limits) is filled in, and each filling-in is listed here
so that an admin can see what the figures rest on. Pure.
"""

from __future__ import annotations

from burstd.simulate.engine import SimSetup
from burstd.simulate.traces import TraceInfo, TraceJob


def site_line(config_path: str | None, setting: str | None, setup: SimSetup) -> str:
    w = setup.config.policy.waiting
    if config_path:
        return (f"the daemon's policy as {config_path} configures it: its [[pools]], [policy] and [budget], "
                f"decide() as the daemon calls it (waiting.kind {w.kind} in the burstd row)")
    src = f"the {setting} setting's site" if setting else "a built-in site"
    return (f"{src}; burstd runs the daemon's default [policy] (min_expected_wait_s {w.min_expected_wait_s:g}, "
            f"burstd_min_wait_s {w.burstd_min_wait_s:g}, wait_value_per_hour {w.wait_value_per_hour:g})")


def assumptions(info: TraceInfo, jobs: list[TraceJob], setup: SimSetup, *, onprem_cpus: int | None,
                onprem_gpus: int | None, spot_root: str | None, config_path: str | None) -> list[str]:
    """One sentence per assumption the replay made, in the order an admin would check them."""
    out: list[str] = []
    unit = "GPUs" if setup.gpu else "CPUs"
    if setup.gpu:
        size = "given: --onprem-gpus" if onprem_gpus else "assumed: Philly's 232 nodes x 8 GPUs"
    elif onprem_cpus:
        size = "given: --onprem-cpus"
    elif info.max_procs:
        size = "the trace header's MaxProcs"
    elif info.max_nodes:
        size = "the trace header's MaxNodes, one CPU a node"
    else:
        size = "assumed: the trace states no size"
    out.append(f"site size: {setup.onprem_units} on-prem {unit} ({size})")
    if setup.gpu:
        shape = "assumed: 8-GPU nodes"
    elif info.max_procs and info.max_nodes:
        shape = "MaxProcs / MaxNodes from the trace header"
    elif info.max_nodes:
        shape = "one CPU a node (MaxNodes without MaxProcs)"
    else:
        shape = ("assumed: the smallest cloud node of the config" if config_path
                 else "assumed: the built-in cloud node")
    out.append(f"node shape: {setup.units_per_node} {unit} a node ({shape})")
    if setup.market == "on-demand":
        out.append("spot: none, every pool on-demand (--market on-demand)")
    elif setup.spot is not None:
        out.append(f"spot: preemptions drawn from the measured traces in {spot_root} (found; "
                   f"{setup.spot.rate_per_hour:.2f} preemptions a node-hour)")
    else:
        out.append("spot: no preemption traces, so spot is never preempted in this replay")
    from_run = sum(1 for j in jobs if j.time_limit <= j.runtime)
    if from_run:
        out.append(f"time limits: {from_run} of {len(jobs)} jobs have a limit equal to their run time (the trace "
                   "records none, or the job ran to its limit): their on-prem start estimates are exact")
    else:
        out.append(f"time limits: all {len(jobs)} jobs carry their requested limit; start estimates use the "
                   "limits, as Slurm's do, not the run times")
    budget = setup.config.budget
    if config_path and budget.default_account_usd is None:
        accounts = {j.account for j in jobs}
        unfunded = accounts - set(budget.accounts)
        if unfunded:
            out.append(f"budgets: {len(unfunded)} of the trace's {len(accounts)} accounts have no [budget.accounts] "
                       "entry and the config sets no default_account_usd, so their jobs never burst, as the daemon "
                       "would treat them (set budget.default_account_usd to replay them bursting)")
    cycle = setup.config.daemon.cycle_interval_s
    out.append(f"decide() every {setup.cycle_s:g} s (the daemon's daemon.cycle_interval_s: {cycle:g} s); cloud "
               f"nodes boot in {setup.boot_s:g} s (decide() bills policy.boot_overhead_s "
               f"{setup.config.policy.boot_overhead_s:g} s)")
    lim = setup.user_limits
    if lim.active:
        out.append(f"per-user limit on-prem: at most {lim.caps(unit)} a user at once; a job its "
                   "user's limit holds waits without holding back the queue or the backfill")
    if setup.queue_priority.active:
        out.append(f"queue priority on-prem: classes {setup.queue_priority.describe()} "
                   f"({setup.queue_priority.source}); the queue is in class order, then submit order, and "
                   "backfill holds one reservation for its head")
    out.append(f"checkpointing: {setup.checkpoint_share:.0%} of jobs every {setup.checkpoint_s:g} s; decide() is "
               f"told a requeued job kept whole policy.checkpoint_interval_s "
               f"({setup.config.policy.checkpoint_interval_s:g} s) of each cloud run, as the daemon tells it")
    return out
