"""Prometheus metrics (prometheus-client). Served only when ``daemon.metrics_port`` is set.

Each ``Metrics`` owns its own registry, so tests and several daemons in one process never collide.
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server


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
        self.hook_calls = Counter("burstd_hook_calls", "Slurm hook calls", ["hook", "outcome"], registry=r)
        self.errors = Counter("burstd_errors", "Errors by class", ["error_class"], registry=r)
        self.actions = Counter("burstd_actions", "Reconcile actions applied", ["action"], registry=r)
        self._lease_keys: set[tuple[str, str]] = set()
        self._partition_keys: set[str] = set()

    def set_leases(self, counts: dict[tuple[str, str], int]) -> None:
        for key in self._lease_keys - set(counts):
            self.leases.labels(*key).set(0)
        for key, n in counts.items():
            self.leases.labels(*key).set(n)
        self._lease_keys |= set(counts)

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

    def error(self, exc: BaseException | str) -> None:
        self.errors.labels(exc if isinstance(exc, str) else type(exc).__name__).inc()

    def serve(self, port: int, address: str = "127.0.0.1"):
        return start_http_server(port, addr=address, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
