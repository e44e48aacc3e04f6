"""Prometheus metrics (prometheus-client). Served only when ``daemon.metrics_port`` is set.

Each ``Metrics`` owns its own registry, so tests and several daemons in one process never collide. Every
labelled series an alert or dashboard panel names (``monitoring/``) is created at start-up (at 0) for each
pool, state and action, so an expression returns data before the first event instead of "no data".
Money is exported in dollars (``*_usd``: Prometheus wants base units); the API's JSON keeps micro-dollars.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client import (CollectorRegistry, Counter, Gauge, GCCollector, Histogram, ProcessCollector,
                               generate_latest)

from burstd.daemon import actions as _actions
from burstd.daemon.job_progress import JobProgress
from burstd.domain.lease import OPEN_STATES
from burstd.domain.money import MICROS_PER_USD

#: Every action the executor applies (``burstd_actions_total{action}``), TerminateOrphan included.
ACTION_NAMES = sorted(n for n, c in vars(_actions).items() if isinstance(c, type) and c.__module__ == _actions.__name__
                      and hasattr(c, "__dataclass_fields__") and n != "Intent")


#: Slurm's hooks and what a call can come to (``burstd_hook_calls_total{hook,outcome}``, api/routers/hooks.py)
HOOKS = ("resume", "suspend", "resume-fail")
HOOK_OUTCOMES = ("ok", "rejected", "busy", "late")


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.leases = Gauge("burstd_leases", "Leases by state and pool", ["state", "pool"], registry=r)
        self.pending_jobs = Gauge("burstd_pending_jobs", "Pending jobs by partition", ["partition"], registry=r)
        self.pending_node_hours = Gauge(
            "burstd_pending_node_hours", "Node-hours asked for by pending jobs (time limit x nodes)",
            ["partition"], registry=r,
        )
        self.burst_eligible = Gauge("burstd_burst_eligible_jobs", "Pending jobs holding a cloud partition", registry=r)
        self.launch_latency = Histogram(
            "burstd_launch_latency_seconds", "Lease recorded (ResumeProgram) to provider launch returned",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=r,
        )
        self.resume_to_launch = Histogram(
            "burstd_resume_to_launch_seconds", "ResumeProgram started to provider launch called",
            buckets=(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5), registry=r,
        )
        self.ready_latency = Histogram(
            "burstd_ready_latency_seconds", "Lease recorded to slurmd registered (READY)",
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=r,
        )
        self.cycle_seconds = Histogram(
            "burstd_cycle_seconds", "Decision-cycle time",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10), registry=r,
        )
        self.last_cycle = Gauge("burstd_last_cycle_timestamp_seconds", "Unix time the last cycle ended", registry=r)
        self.hook_calls = Counter("burstd_hook_calls", "Slurm hook calls", ["hook", "outcome"], registry=r)
        self.errors = Counter("burstd_errors", "Errors by class", ["error_class"], registry=r)
        self.parity_refusals = Counter("burstd_parity_refusals", "Cloud nodes the parity gate refused before slurmd "
                                       "started (they differ from the on-prem reference)", ["pool"], registry=r)
        self.actions = Counter("burstd_actions", "Reconcile actions applied", ["action"], registry=r)
        self.preemptions = Counter(
            "burstd_preemptions", "Cloud nodes lost to their provider (notice deadline passed, or instance vanished)",
            registry=r,
        )
        self.jobs_requeued = Counter("burstd_jobs_requeued", "Jobs that went back to the queue from a cloud node: "
                                     "requeued by burstd when the node was lost, or by the job itself (the "
                                     "templates requeue on a notice)", registry=r)
        self.lease_oldest = Gauge("burstd_lease_oldest_seconds", "Time in its state of the oldest open lease",
                                  ["state", "pool"], registry=r)
        self.lease_timeout = Gauge("burstd_lease_timeout_seconds",
                                   "How long a lease may stay LAUNCHING/BOOTING (daemon.launch/boot_timeout_s)",
                                   ["state"], registry=r)
        self.pool_protected = Gauge("burstd_pool_protected", "1 while the pool is in protected mode", ["pool"],
                                    registry=r)
        self.budget_limit = Gauge("burstd_budget_limit_usd", "Budget of the current period (default included)",
                                  ["account"], registry=r)
        self.budget_spent = Gauge("burstd_budget_spent_usd", "Recorded spend in the current period", ["account"],
                                  registry=r)
        self.burn_rate = Gauge("burstd_burn_rate_usd_per_hour", "What the live leases cost an hour now", registry=r)
        # issue 24: data moved to and from the pools, and what it cost (booked by burstd.daemon.data_spend)
        self.data_spend = Counter("burstd_data_spend_usd", "Data cost booked, by kind (transfer_in, transfer_out, "
                                  "storage) and pool", ["kind", "pool"], registry=r)
        self.data_bytes = Counter("burstd_data_bytes", "Bytes moved between the site and a pool, by direction",
                                  ["direction", "pool"], registry=r)
        self.kept_home_for_data = Gauge("burstd_jobs_kept_home_for_data", "Pending jobs the last cycle kept on-prem "
                                        "for their data (never-leave, or moving it is not worth the wait)",
                                        registry=r)
        self.burn_cap = Gauge("burstd_burn_rate_cap_usd_per_hour", "budget.burn_rate_usd_per_hour (+Inf: no cap)",
                              registry=r)
        # training progress the jobs report (burstd.daemon.job_progress): one series a running job that reports
        job_labels = ["job", "account", "side"]
        self.training_step = Gauge("burstd_training_step", "Steps done, as the job last reported", job_labels,
                                   registry=r)
        self.training_step_seconds = Gauge("burstd_training_step_seconds", "Seconds a training step, as the job "
                                           "last reported", job_labels, registry=r)
        self.training_gpu_util = Gauge("burstd_training_gpu_utilization_ratio", "GPU utilisation (0-1) on the "
                                       "job's reporting node, where NVML is present", job_labels, registry=r)
        self.training_cost_per_step = Gauge("burstd_training_cost_per_step_usd", "What a step costs on the job's "
                                            "cloud leases (cloud runs only)", job_labels, registry=r)
        self.training_cost_per_epoch = Gauge("burstd_training_cost_per_epoch_usd", "What an epoch costs on the "
                                             "job's cloud leases (cloud runs that say their steps an epoch)",
                                             job_labels, registry=r)
        self.training_reports = Counter("burstd_training_reports", "Progress reports from jobs, by outcome "
                                        "(ok, refused: not the job's own; invalid: malformed)", ["outcome"],
                                        registry=r)
        for outcome in ("ok", "refused", "invalid"):
            self.training_reports.labels(outcome)
        self._training_keys: set[tuple[str, str, str]] = set()
        for name in ACTION_NAMES:
            self.actions.labels(name)
        self.burn_cap.set(math.inf)
        self._lease_keys: set[tuple[str, str]] = set()
        self._partition_keys: set[str] = set()
        # The daemon's own process (memory, CPU, open files) and its garbage collector, as Python exporters give
        # them: what an admin watches for a leak, and where it shows that the collector, paused while the daemon
        # starts (burstd.start_up), runs again once it has started.
        ProcessCollector(registry=r)
        GCCollector(registry=r)

    def setup(self, pools: Iterable[str], launch_timeout_s: float, boot_timeout_s: float,
              burn_cap_micros_per_hour: int | None) -> None:
        """The series known from the config: every (open state, pool) at 0, the timeouts and the burn cap."""
        pools = list(pools)
        self.set_leases({(s.value, p): 0 for s in OPEN_STATES for p in pools}, {})
        for p in pools:
            self.pool_protected.labels(p).set(0)
            self.parity_refusals.labels(p)
        for hook in HOOKS:  # the dashboard's failed-hook panel reads 0, not "no data", before the first refusal
            for outcome in HOOK_OUTCOMES:
                self.hook_calls.labels(hook, outcome)
        self.lease_timeout.labels("LAUNCHING").set(launch_timeout_s)
        self.lease_timeout.labels("BOOTING").set(boot_timeout_s)
        self.burn_cap.set(math.inf if burn_cap_micros_per_hour is None else burn_cap_micros_per_hour / MICROS_PER_USD)

    def set_leases(self, counts: dict[tuple[str, str], int], oldest_s: dict[tuple[str, str], float]) -> None:
        for key in self._lease_keys - set(counts):
            self.leases.labels(*key).set(0)
            self.lease_oldest.labels(*key).set(0)
        for key, n in counts.items():
            self.leases.labels(*key).set(n)
            self.lease_oldest.labels(*key).set(oldest_s.get(key, 0.0))
        self._lease_keys |= set(counts)

    def set_money(self, limits_micros: dict[str, int | None], spent_micros: dict[str, int],
                  burn_micros_per_hour: int) -> None:
        for account in set(limits_micros) | set(spent_micros):
            lim = limits_micros.get(account)
            if lim is not None:
                self.budget_limit.labels(account).set(lim / MICROS_PER_USD)
            self.budget_spent.labels(account).set(spent_micros.get(account, 0) / MICROS_PER_USD)
        self.burn_rate.set(burn_micros_per_hour / MICROS_PER_USD)

    def set_pressure(self, jobs: dict[str, int], node_hours: dict[str, float], eligible: int) -> None:
        for part in self._partition_keys - set(jobs):
            self.pending_jobs.labels(part).set(0)
            self.pending_node_hours.labels(part).set(0)
        for part, n in jobs.items():
            self.pending_jobs.labels(part).set(n)
            hours = node_hours.get(part, 0.0)
            self.pending_node_hours.labels(part).set(hours if math.isfinite(hours) else 0.0)  # never NaN/inf
        self._partition_keys |= set(jobs)
        self.burst_eligible.set(eligible)

    def set_training(self, running: Iterable[JobProgress]) -> None:
        """One series per running job that reported; a job that stopped running loses its series."""
        keys = set()
        for p in running:
            key = (str(p.job_id), p.account, p.side)
            keys.add(key)
            self.training_step.labels(*key).set(p.step)
            self.training_step_seconds.labels(*key).set(p.step_time_s)
            if p.gpu_util is not None:
                self.training_gpu_util.labels(*key).set(p.gpu_util / 100.0)
            if p.cost_per_step_micros is not None:
                self.training_cost_per_step.labels(*key).set(p.cost_per_step_micros / MICROS_PER_USD)
            if p.cost_per_epoch_micros is not None:
                self.training_cost_per_epoch.labels(*key).set(p.cost_per_epoch_micros / MICROS_PER_USD)
        for key in self._training_keys - keys:
            for gauge in (self.training_step, self.training_step_seconds, self.training_gpu_util,
                          self.training_cost_per_step, self.training_cost_per_epoch):
                try:
                    gauge.remove(*key)
                except KeyError:
                    pass
        self._training_keys = keys

    def lost_node(self, requeued_jobs: int) -> None:
        """A cloud node its provider took away (preempted or vanished), with the jobs that went back to the queue."""
        self.preemptions.inc()
        self.jobs_requeued.inc(requeued_jobs)

    def error(self, exc: BaseException | str) -> None:
        self.errors.labels(exc if isinstance(exc, str) else type(exc).__name__).inc()

    def serve(self, port: int, address: str = "127.0.0.1"):
        from burstd.daemon.conn_guard import serve_metrics  # the capped server (issue 21, item 3)

        return serve_metrics(self.registry, port, address)

    def render(self) -> bytes:
        return generate_latest(self.registry)
