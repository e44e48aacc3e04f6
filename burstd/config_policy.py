"""The ``[policy]`` and ``[budget]`` sections of burstd's configuration: which jobs may burst, how long they
wait first, and the money they may spend (what ``burstd.policy.decide`` reads; docs/policy.md, docs/budgets.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from burstd.config_types import Count, Name, PosSeconds, Seconds, Usd, _Section

class WaitingPolicy(_Section):
    """How long a job waits on-prem before it may burst (see docs/policy.md)."""

    kind: Literal["none", "constant", "compute", "burstd"] = "burstd"
    min_wait_s: Seconds = 300.0
    # compute-wait: wait = coefficient * node-hours asked for (big jobs wait longer)
    wait_per_node_hour_s: Seconds = 60.0
    max_wait_s: Seconds = 6 * 3600.0
    # burst only when the expected on-prem start is at least this far away. The burstd defaults here are the
    # one set the daemon and `burstctl simulate` both use (issue 25): chosen on training prefixes under the
    # value-of-waiting rule (docs/policy.md), which already weighs the wait a burst saves against its bill
    min_expected_wait_s: Seconds = 300.0
    # burstd kind (see docs/policy.md): stay when the expected remaining on-prem wait is under
    # min_expected_wait_s (or wait_to_runtime_ratio x time limit); burst at once when it is at least
    # burstd_wait_per_node_hour_s x node-hours; else burst after the compute-wait above
    burstd_wait_per_node_hour_s: Seconds = 19200.0
    burstd_min_wait_s: Seconds = 0.0
    wait_to_runtime_ratio: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = 0.0
    # burstd kind: a job preempted max_preemptions_spot times (so it may only burst on-demand, at several
    # times the spot price) stays on-prem while its expected on-prem start is under this x its time limit
    escalated_wait_to_runtime_ratio: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = 1.0
    # an already-eligible job keeps its cloud partition until its expected wait drops below
    # keep_fraction x the burst thresholds (hysteresis: no flapping between cycles)
    keep_fraction: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.5
    # burstd kind, value of waiting (burstd.policy.progress): an hour of a job's on-prem wait is worth this many
    # node-hours of the site's cheapest on-demand node of its kind (CPU or GPU); past the first wait and the
    # "start is near" check, a job bursts when the wait it saves is worth its expected cloud bill. 0 = off
    # (the compute-wait steps above). 9: chosen on the training prefixes (docs/policy.md)
    wait_value_per_hour: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 9.0
    # burstd kind, with the value of waiting: a job that has waited this many times its time limit (at least
    # 10 min) bursts even where the value rule would keep it home, when bursting still saves time (a bound on
    # any job's slowdown: the rule weighs only the job's own wait, not the queue a big job stalls). 0 = no
    # bound. 2: the smallest that kept every training prefix cheaper than compute-wait (docs/policy.md)
    max_wait_to_limit_ratio: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = 2.0


class PolicyConfig(_Section):
    onprem_partitions: list[Name] = ["batch"]
    # map an on-prem partition to the pools its jobs may burst to; missing = every pool
    burst_to: dict[str, list[str]] = {}
    waiting: WaitingPolicy = WaitingPolicy()
    min_priority: int = Field(default=0, ge=0, le=2**32)
    burst_reasons: list[str] = ["Resources", "Priority", "ReqNodeNotAvail", "Nodes_required_for_job_are_DOWN"]
    exclude_accounts: list[str] = []
    exclude_users: list[str] = []
    exclude_partitions: list[str] = []
    # a job whose comment holds it never bursts; empty would silently take the opt-out away from every user
    opt_out_comment: str = Field(default="burst:no", max_length=64)
    # optional cap: after this many preemptions a job is on-demand only (None: Uniform Progress alone decides)
    max_preemptions_spot: int | None = Field(default=None, ge=0, le=1_000_000)
    max_preemptions_total: int = Field(default=4, ge=0, le=1_000_000)  # then back on-prem only
    prewarm_nodes: int = Field(default=0, ge=0, le=1_000_000)
    paused: bool = False
    # min wait (s) on-prem before bursting, per partition / per QOS (the larger applies, on top of `waiting`)
    min_wait_s_by_partition: dict[str, Seconds] = {}
    min_wait_s_by_qos: dict[str, Seconds] = {}
    exclude_qos: list[str] = []
    # cloud node caps per account (live leases + nodes of eligible jobs); None = no cap
    max_nodes_per_account: dict[str, Count] = {}
    default_max_nodes_per_account: int | None = Field(default=None, ge=0, le=1_000_000)
    # cost model: seconds billed per node before the job starts (boot) and the checkpoint interval that
    # bounds the work a spot preemption loses (for the spot vs on-demand choice)
    boot_overhead_s: Seconds = 300.0
    checkpoint_interval_s: PosSeconds = 3600.0
    # rank spot against on-demand by the expected time a job of N nodes needs to finish on spot, when any of
    # its nodes' preemption restarts it from its last checkpoint (docs/policy.md, "Spot or on-demand");
    # false: the plain "price x (1 + rework)" ranking. On by default since the value-of-waiting rule (issue 10):
    # that rule weighs this expected bill against the wait, and on the training prefixes the plain ranking sent
    # big jobs to spot that were preempted within minutes, again and again
    risk_aware_market: bool = True
    # Uniform Progress (burstd.policy.progress): a preempted job's deadline is submit + progress_slack x its time
    # limit; behind that line by more than a boot and a restart, it may not go back to spot. 0 = off. 2: the
    # smallest slack cheaper than compute-wait at no worse mean JCT on the Philly training prefix and on a
    # held-out window (docs/policy.md)
    progress_slack: float = Field(default=2.0, ge=0, le=1000, allow_inf_nan=False)
    # a lease whose jobs are unknown (idle, booting for a job that left) is committed for this long
    idle_commit_s: Seconds = 600.0
    # a job without a time limit (and no partition MaxTime) has unbounded cost: it never bursts

    @field_validator("opt_out_comment")
    @classmethod
    def _an_opt_out(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty: users could no longer keep a job from bursting (e.g. burst:no)")
        return value


class BudgetConfig(_Section):
    period: Literal["month", "week", "day"] = "month"
    site_usd: Usd | None = None  # None = no site cap
    burn_rate_usd_per_hour: Usd | None = None
    accounts: dict[str, Usd] = {}  # initial per-account budgets; `burstctl budget set` overrides
    default_account_usd: Usd | None = None  # None = accounts without a budget may not burst
    accrual_interval_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 60.0
