"""Run several policies over one trace and report them side by side (what ``burstctl simulate`` prints).

    report = simulate_trace("SDSC-BLUE-2000-4.2-cln.swf.gz", policies=["never", "burstd"], limit_jobs=5000)
    plot_frontier(report, "frontier.png")
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from burstd.config import Config, PoolDataConfig
from burstd.simulate.assumptions import assumptions, site_line
from burstd.simulate.data_model import DEFAULT_LINK, DataModel
from burstd.simulate.engine import SimSetup
from burstd.simulate.limits import NO_LIMITS, UserLimits
from burstd.simulate.policies import DEFAULT_CHECKPOINT_SHARE, POLICIES, UNLIMITED_USD, make_setup, run_policy
from burstd.simulate.placement import PLACEMENTS
from burstd.simulate.queue_priority import queue_priority as read_queue_priority
from burstd.simulate.settings import BILLING, get_setting
from burstd.simulate.spot import PACKAGED_TRACES
from burstd.simulate.traces import read_trace

# wait_* is to the final start (the run that finished); first_wait_mean_s is kept to show what spot hides
METRICS = ("cloud_cost_usd", "jobs", "jobs_burst", "wait_mean_s", "wait_p95_s", "first_wait_mean_s",
           "delay_mean_s", "delay_p95_s", "jct_mean_s", "jct_p95_s", "bounded_slowdown_mean", "preemptions",
           "lost_node_hours", "unfinished")


def default_spot_root() -> Path:
    """``BURSTD_SPOT_TRACES`` if set, else the traces shipped in the package (no sibling folder needed)."""
    env = os.environ.get("BURSTD_SPOT_TRACES")
    return Path(env) if env else PACKAGED_TRACES


def _one(args):
    name, setup, jobs, seed = args
    return run_policy(name, setup, jobs, seed)


def simulate_trace(path: str | Path, *, format: str | None = None, policies: list[str] | None = None,
                   onprem_cpus: int | None = None, onprem_gpus: int | None = None, config: Config | None = None,
                   limit_jobs: int | None = None, seed: int = 1, spot_root: Path | None = None,
                   boot_s: float | None = None, cycle_s: float = 120.0, workers: int = 1,
                   market: str | None = None, checkpoint_share: float | None = None,
                   checkpoint_s: float | None = None, setting: str | None = None, placement: str | None = None,
                   warmup_jobs: int | None = None, backfill_depth: int | None = None,
                   bill_per: str | None = None, out_of_order: bool = False,
                   data_median_gb: float | None = None, config_path: str | None = None,
                   bound: bool = False, bound_time_s: float = 60.0, hindsight_time_s: float | None = None,
                   user_limits: UserLimits = NO_LIMITS, queue_priority: str | None = None) -> dict:
    """Replay ``path`` once per policy; returns the report dict (metrics per policy, ratios to baselines).

    ``setting`` names a group of the options below (``burstd.simulate.settings``); an option given
    explicitly overrides the setting's. ``data_median_gb``: replay with the data-size model
    (``burstd.simulate.data_model``), pools without a ``[pools.data]`` link getting its default link.
    ``config_path`` names the file ``config`` came from, for the header (``site`` and ``assumptions``: what the
    replay runs and what it assumed). ``bound``: each policy's row also carries ``bound_usd``, the hindsight
    lower bound on cloud cost at its mean JCT (``burstd.simulate.bound``; ``bound_time_s``: branch and bound's
    limit a policy, 0 for the LP alone). ``hindsight_time_s``: each row also carries ``hindsight_usd``, the cheapest
    plan found in hindsight under the site's own scheduler at its mean JCT, searched at most this long a policy
    (``burstd.simulate.hindsight``). ``user_limits``: per-user running limits on-prem
    (``burstd.simulate.limits``); ``queue_priority``: "auto" or queue numbers highest class first, the on-prem
    queue ordered by class then submit (``burstd.simulate.queue_priority``)."""
    policies = list(policies or POLICIES)
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; built-in: {', '.join(POLICIES)}")
    st = get_setting(setting) if setting is not None else None
    if st is not None:
        if config is not None:
            raise ValueError(f"the {st.name} setting brings its own site (cloud pool, waits); drop --config")
        if onprem_cpus is not None:
            raise ValueError(f"the {st.name} setting replays a GPU trace; give --onprem-gpus, not --onprem-cpus")
        config, onprem_gpus = st.config(), onprem_gpus or st.onprem_gpus
        market = market if market is not None else st.market
        boot_s = boot_s if boot_s is not None else st.boot_s
    if bill_per is not None and bill_per not in BILLING:
        raise ValueError(f"unknown billing {bill_per!r}; known: {', '.join(BILLING)}")
    placement = placement or (st.placement if st else "fluid")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    warmup = warmup_jobs if warmup_jobs is not None else (st.warmup_jobs if st else 0)
    depth = backfill_depth if backfill_depth is not None else (st.backfill_depth if st else 100)
    slices = bill_per == "gpu-hour" if bill_per is not None else bool(st and st.gpu_slices)
    jobs, info = read_trace(path, format, limit_jobs)
    classes = read_queue_priority(queue_priority, info, str(path))
    gpu = info.format == "philly" or (onprem_gpus is not None and onprem_cpus is None)
    if (st is not None or slices) and not any(j.gpus for j in jobs):
        raise ValueError("no job in the trace asks for GPUs: GPU-hour billing and the starburst setting "
                         "need a GPU trace")
    if slices and not gpu:
        raise ValueError("--bill-per gpu-hour needs a GPU replay (a Philly trace, or --onprem-gpus)")
    if warmup and 2 * warmup >= len(jobs):
        raise ValueError(f"--warmup-jobs {warmup} leaves out {2 * warmup} of the {len(jobs)} jobs read, "
                         "all of them: give a smaller --warmup-jobs (0 keeps every job)")
    if config is not None and not config.pools:
        raise ValueError("the config has no [[pools]] to burst to")
    if (bound or hindsight_time_s is not None) and warmup:
        raise ValueError("--bound and --hindsight cover every job of the replay: give --warmup-jobs 0 with them")
    root = spot_root or default_spot_root()
    setup = make_setup(info, gpu, config, onprem_cpus, onprem_gpus, root, seed,
                       120.0 if boot_s is None else boot_s, cycle_s, market,
                       DEFAULT_CHECKPOINT_SHARE if checkpoint_share is None else checkpoint_share, checkpoint_s,
                       placement=placement, gpu_slices=slices, warmup_jobs=warmup, backfill_depth=depth,
                       gpus_per_node=st.gpus_per_node if st else 8,
                       constant_wait_s=st.constant_wait_s if st else None, out_of_order=out_of_order,
                       user_limits=user_limits, queue_priority=classes)
    if data_median_gb is not None:
        setup = with_data(setup, DataModel(data_median_gb, seed=seed))
    tasks = [(p, setup, jobs, seed) for p in policies]
    if workers > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(min(workers, len(tasks))) as ex:
            results = list(ex.map(_one, tasks))
    else:
        results = [_one(t) for t in tasks]
    out: dict[str, Any] = {
        "trace": str(path), "format": info.format, "jobs_read": len(jobs), "skipped": info.skipped,
        "skip_reasons": dict(info.skip_reasons), "onprem_units": setup.onprem_units,
        "onprem_units_per_node": setup.units_per_node, "checkpoint_share": setup.checkpoint_share,
        "checkpoint_interval_s": setup.checkpoint_s,
        "cloud_shapes": {p.name: {"cpus": p.cpus, "gpus": p.gpus, "spot": p.price_per_hour if p.market == "spot"
                                  else None, "on-demand": p.ondemand_price_per_hour if p.market == "spot"
                                  else p.price_per_hour} for p in setup.config.pools},
        "too_big_for_onprem": sum(1 for j in jobs if (j.gpus if gpu else j.cpus) > setup.onprem_units),
        "units": "gpus" if gpu else "cpus", "spot_preemption_rate_per_node_hour":
            round(setup.spot.rate_per_hour, 4) if setup.spot else 0.0,
        "spot_traces": str(root) if setup.spot else None, "market": market or "as configured",
        "setting": st.name if st else None, "placement": setup.placement, "backfill_depth": setup.backfill_depth,
        "out_of_order": setup.out_of_order, "user_max_running_jobs": user_limits.max_jobs,
        "user_max_running_units": user_limits.max_units, "queue_priority": classes.describe() or None,
        "billing": "gpu-hour" if setup.gpu_slices else "node-hour", "warmup_jobs": setup.warmup_jobs,
        "boot_s": setup.boot_s,
        "data_model": None if setup.data is None else {"median_gb": setup.data.median_gb, "sigma": setup.data.sigma,
                                                        "shared_share": setup.data.shared_share,
                                                        "datasets": setup.data.datasets},
        "site": site_line(config_path, st.name if st else None, setup),
        "assumptions": assumptions(info, jobs, setup, onprem_cpus=onprem_cpus, onprem_gpus=onprem_gpus,
                                   spot_root=str(root), config_path=config_path),
        "policies": {},
    }
    by = {r.policy: r for r in results}
    for r in results:
        row = {m: _round(getattr(r, m)) for m in METRICS}
        row["cost_by_market"] = {k: round(v, 2) for k, v in r.cost_by_market.items()}
        row["cannot_burst"] = r.cannot_burst
        if setup.data is not None:
            row["data"] = {"usd": round(r.data_usd, 2), "gb_in": round(r.data_gb_in, 1), "cache_hits": r.cache_hits,
                           "jobs_kept_home_for_data": r.kept_home_for_data}
        row["wall_s"] = round(r.wall_s, 2)
        row["cpu_s"] = round(r.cpu_s, 2)
        od = by.get("ondemand-all")
        nv = by.get("never")
        if od is not None and od.cloud_cost_usd > 0:
            row["cost_vs_ondemand_all"] = round(r.cloud_cost_usd / od.cloud_cost_usd, 4)
        if nv is not None and nv.wait_mean_s > 0:
            row["wait_vs_never"] = round(r.wait_mean_s / nv.wait_mean_s, 4)
        if nv is not None and nv.jct_mean_s > 0:
            row["jct_vs_never"] = round(r.jct_mean_s / nv.jct_mean_s, 4)
        out["policies"][r.policy] = row
    out["frontier"] = frontier(out["policies"])
    if bound:
        _add_bound(out, setup, jobs, bound_time_s)
    if hindsight_time_s is not None:
        _add_hindsight(out, setup, jobs, {r.policy: r.jct_mean_s for r in results}, hindsight_time_s)
    return out


def _add_bound(out: dict, setup: Any, jobs: list, time_s: float = 60.0) -> None:
    import time

    from burstd.simulate.bound import build_bound

    t = time.process_time()
    model = build_bound(setup, jobs, integral=time_s > 0, time_limit_s=time_s)
    solved = {name: model.cost_at(row["jct_mean_s"]) for name, row in out["policies"].items()}
    for name, row in out["policies"].items():
        usd = solved[name]
        if usd is not None:
            # the least cost never falls as the JCT allowed shrinks, so a bound proven at a slower policy's
            # JCT holds at this one too (branch and bound stopped early proves less at some JCTs than others)
            usd = max([usd] + [b for n, b in solved.items() if b is not None
                               and out["policies"][n]["jct_mean_s"] >= row["jct_mean_s"]])
        row["bound_usd"] = None if usd is None else round(usd, 2)
        if usd is not None and row["cloud_cost_usd"] > 0:
            row["cost_vs_bound"] = round(row["cloud_cost_usd"] / usd, 3) if usd > 0 else None
    method = (f"MIP, whole jobs to the cloud, dual bound after at most {time_s:g} s a policy" if model.integral
              else "LP relaxation")
    out["bound"] = {"method": f"{method} (burstd.simulate.bound), hindsight, HiGHS",
                    "slot_s": model.slot_s, "window_slots": model.window_slots,
                    "least_mean_jct_s": round(model.min_mean_jct_s, 1),
                    "cpu_s": round(time.process_time() - t, 1)}


def _add_hindsight(out: dict, setup: Any, jobs: list, jct: dict[str, float], time_s: float) -> None:
    """Beside the bound, the cheapest hindsight plan found at each policy's mean JCT (``jct``, unrounded) under
    the site's own scheduler (``burstd.simulate.hindsight``): the optimum lies between the two."""
    import time

    from burstd.simulate.hindsight import Hindsight

    t = time.process_time()
    h = Hindsight(setup, jobs)
    found = []  # (mean JCT, cost) of every plan found: a plan meets any target at or above its mean JCT
    for target in sorted(set(jct.values())):
        plan = h.plan_for(target, time_s)
        if plan is not None:
            found.append((plan.mean_jct_s, plan.cost_usd))
    for name, row in out["policies"].items():
        usd = min((c for at, c in found if at <= jct[name]), default=None)
        row["hindsight_usd"] = None if usd is None else round(usd, 2)
        if usd is not None and row["cloud_cost_usd"] > 0:
            row["cost_vs_hindsight"] = round(row["cloud_cost_usd"] / usd, 3) if usd > 0 else None
    out["hindsight"] = {"method": "greedy plan in hindsight, on-demand, the site's own scheduler, replayed "
                                  f"(burstd.simulate.hindsight), at most {time_s:g} s a policy",
                        "replays": h.replays, "cpu_s": round(time.process_time() - t, 1)}
    b, pol = setup.config.budget, setup.config.policy
    if (b.site_usd is not None or b.burn_rate_usd_per_hour is not None or b.accounts
            or b.default_account_usd is None or b.default_account_usd < UNLIMITED_USD
            or pol.max_nodes_per_account or pol.default_max_nodes_per_account is not None):
        out["hindsight"]["caveat"] = ("the config sets budgets or per-account limits, which the plan ignores: "
                                      "here it is a reference point, not a bound on the optimum")


def frontier(rows: dict[str, dict], key: str = "jct_mean_s") -> list[str]:
    """Policies no other policy dominates on (cloud cost, ``key``): none both no dearer and no slower,
    and strictly better on one. Judged on mean JCT, not first-start wait, which hides spot restarts."""
    def dominated(a: dict) -> bool:
        return any(b is not a and b["cloud_cost_usd"] <= a["cloud_cost_usd"] and b[key] <= a[key]
                   and (b["cloud_cost_usd"] < a["cloud_cost_usd"] or b[key] < a[key]) for b in rows.values())
    return [name for name, row in rows.items() if not dominated(row)]


def _round(v):
    return round(v, 3) if isinstance(v, float) else v


def plot_frontier(report: dict, path: str | Path, sweeps: dict[str, list[tuple[float, float]]] | None = None,
                  title: str | None = None) -> Path:
    """Cost versus mean JCT, one point per policy (and one curve per knob sweep of (JCT s, cost), if
    given), as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["policies"]
    on = set(report.get("frontier") or frontier(rows)) if rows else set()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for name, curve in (sweeps or {}).items():
        xs = [w / 3600 for w, _ in curve]
        ys = [c for _, c in curve]
        ax.plot(xs, ys, "-", alpha=0.6, label=f"{name} (knob sweep)")
    # the frontier as a staircase from the fastest to the cheapest: nothing below-left of it exists
    best = sorted((rows[n]["jct_mean_s"] / 3600, rows[n]["cloud_cost_usd"]) for n in on)
    if best:
        ax.step([x for x, _ in best], [y for _, y in best], where="post", color="0.3", lw=1.2, zorder=2,
                label="frontier (no policy both cheaper and faster)")
    for i, (name, row) in enumerate(rows.items()):
        x, y = row["jct_mean_s"] / 3600, row["cloud_cost_usd"]
        colour = f"C{i % 10}"
        # a dominated policy is drawn hollow, in its own colour
        ax.scatter([x], [y], s=50, zorder=3, edgecolor=colour, facecolor=colour if name in on else "none")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 5), fontsize=9)
    ax.scatter([], [], s=50, facecolor="none", edgecolor="0.3", label="dominated (hollow)")
    ax.margins(x=0.12, y=0.08)  # room for the labels of the outermost points
    ax.set_xlabel("mean job completion time, submit to end (hours)")
    ax.set_ylabel("cloud cost (USD)")
    ax.set_title(title or f"cost vs mean JCT: {Path(report['trace']).name} ({report['jobs_read']} jobs)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def with_data(setup: SimSetup, model: DataModel) -> SimSetup:
    """``setup`` replaying ``model``'s data; a pool whose config names no link gets ``DEFAULT_LINK``."""
    pools = [p if p.data.link_mbps is not None else p.model_copy(update={"data": PoolDataConfig(**DEFAULT_LINK)})
             for p in setup.config.pools]
    return dataclasses.replace(setup, data=model, config=setup.config.model_copy(update={"pools": pools}))
