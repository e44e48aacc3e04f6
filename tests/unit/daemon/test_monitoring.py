"""monitoring/ ships alert rules that promtool accepts and a dashboard whose every expression names only metrics
the daemon exports (a renamed metric fails here, before any Prometheus is started)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from burstd.daemon.metrics import Metrics
from tests.monitoring_exprs import RULES, alert_exprs, metric_names, panel_exprs

ALERTS_WANTED = {"BurstdDown", "BurstdCycleStalled", "BurstdBurnRateOverCap", "BurstdAccountBudgetNearlySpent",
                 "BurstdLeaseStuck", "BurstdOrphansFound", "BurstdPoolProtected", "BurstdPreemptionSpike"}


def exported() -> set[str]:
    m = Metrics()
    m.setup(["local"], 60, 90, None)
    names = set()
    for fam in text_string_to_metric_families(m.render().decode()):
        names.update(s.name for s in fam.samples)
        names.add(fam.name)
    return names | {"up"}  # `up` is Prometheus' own, per scrape job


def test_every_alert_the_admin_needs_is_there():
    assert set(alert_exprs()) == ALERTS_WANTED


@pytest.mark.parametrize("name, expr", sorted({**alert_exprs(), **panel_exprs()}.items()))
def test_every_expression_names_only_exported_metrics(name, expr):
    names = metric_names(expr)
    assert names, f"{name}: no metric found in {expr!r}"
    assert names <= exported(), f"{name}: not exported by the daemon: {sorted(names - exported())}"


def test_metric_names_are_read_from_expressions():
    assert metric_names('max by (state) (burstd_lease_oldest_seconds{state=~"A|B"}) > on (state) '
                        "(1.5 * burstd_lease_timeout_seconds)") == {"burstd_lease_oldest_seconds",
                                                                    "burstd_lease_timeout_seconds"}


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool: Debian package prometheus (install-deps.sh)")
def test_promtool_accepts_the_rules():
    r = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS: 8 rules found" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool: Debian package prometheus (install-deps.sh)")
def test_each_alert_fires_on_its_trouble_and_not_on_a_healthy_daemon():
    tests = RULES.parent / "tests" / "burstd-alerts.test.yml"
    r = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_the_metrics_port_listens_on_loopback_unless_the_admin_says_otherwise():
    """Issue 21 item 9: the metrics carry every account's budget; by default only this host may scrape them
    (docs/security.md says how to keep other local users out too)."""
    from burstd.config import parse_config

    cfg = parse_config({"daemon": {"metrics_port": 9464}})
    server = Metrics().serve(0, cfg.daemon.metrics_address)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
