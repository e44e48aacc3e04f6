"""monitoring/ ships alert rules that promtool accepts and a dashboard whose every expression names only metrics
the daemon exports (a renamed metric fails here, before any Prometheus is started)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from burstd.daemon.metrics import Metrics
from tests.monitoring_exprs import RULES, alert_exprs, dashboard, metric_names, panel_exprs

ALERTS_WANTED = {"BurstdDown", "BurstdCycleStalled", "BurstdBurnRateOverCap", "BurstdAccountBudgetNearlySpent",
                 "BurstdLeaseStuck", "BurstdOrphansFound", "BurstdPoolProtected", "BurstdPreemptionSpike"}


def exported() -> set[str]:
    m = Metrics()
    m.setup(["local"], 60, 90, None)
    names = set()
    for fam in text_string_to_metric_families(m.render().decode()):
        names.update(s.name for s in fam.samples)
        names.add(fam.name)
        if fam.type == "counter":  # a counter with no labelled series yet (errors by class) is exported all the same
            names.add(f"{fam.name}_total")
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


def test_the_daemons_own_process_and_its_collector_are_exported_beside_burstds_metrics():
    """Two daemons in one process (tests) each export them, with no clash between their registries."""
    for m in (Metrics(), Metrics()):
        samples = {s.name: s for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples}
        assert samples["process_resident_memory_bytes"].value > 0
        assert samples["process_open_fds"].value > 0
        assert "python_gc_collections_total" in samples and "python_gc_objects_collected_total" in samples


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


# ------------------------------------------------------------------ issue 26 item 4: the dashboard an admin needs
POOL_METRICS = {"burstd_leases", "burstd_pool_protected", "burstd_parity_refusals_total"}
ACCOUNT_METRICS = {"burstd_budget_spent_usd", "burstd_budget_limit_usd", "burstd_training_step",
                   "burstd_training_step_seconds", "burstd_training_gpu_utilization_ratio",
                   "burstd_training_cost_per_step_usd", "burstd_training_cost_per_epoch_usd"}


def _raw_targets() -> list[tuple[dict, dict]]:
    return [(p, t) for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_the_dashboard_has_datasource_pool_and_account_variables_and_every_panel_uses_them():
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("pool", "account"):
        v = variables[name]
        assert v["type"] == "query" and v["includeAll"] and v["multi"] and v["allValue"] == ".*"
        assert f", {name})" in v["definition"]
    assert "__inputs" not in dashboard()  # the data source is chosen on the dashboard, not at import only
    for panel, target in _raw_targets():
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == "${datasource}", panel["title"]
        names = metric_names(target["expr"])
        if names & POOL_METRICS:
            assert 'pool=~"$pool"' in target["expr"], (panel["title"], target["expr"])
        if names & ACCOUNT_METRICS:
            assert 'account=~"$account"' in target["expr"], (panel["title"], target["expr"])


def test_the_dashboard_opens_on_a_status_row_and_has_an_errors_row_with_hook_failures():
    panels = sorted(dashboard()["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert panels[0]["type"] == "row" and panels[0]["title"] == "Status"
    status = [p for p in panels if p["gridPos"]["y"] == 1]
    assert {p["type"] for p in status} == {"stat"} and len(status) == 6
    assert any('up{job="burstd"}' in t["expr"] for p in status for t in p["targets"])
    rows = [p["title"] for p in panels if p["type"] == "row"]
    errors_row = next(i for i, p in enumerate(panels) if p["type"] == "row" and "Errors" in p["title"])
    below = panels[errors_row + 1:errors_row + 4]
    exprs = " ".join(t["expr"] for p in below for t in p["targets"])
    assert "burstd_errors_total" in exprs and 'burstd_hook_calls_total{outcome!="ok"}' in exprs, rows


def test_spend_is_drawn_on_its_own_axis_and_budgets_as_a_share():
    for panel in dashboard()["panels"]:
        targets = panel.get("targets", [])
        separate = [metric_names(t["expr"]) for t in targets]
        spent = any("burstd_budget_spent_usd" in n for n in separate)
        limit = any("burstd_budget_limit_usd" in n for n in separate)
        if spent and limit:  # both in one panel only as a ratio in one expression, on a percent axis
            assert len(targets) == 1 and panel["fieldConfig"]["defaults"]["unit"] == "percent", panel["title"]
            assert panel["fieldConfig"]["defaults"]["max"] == 100


def test_no_two_panels_overlap():
    cells: dict[tuple[int, int], str] = {}
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (p["title"], cells.get((x, y)))
                cells[(x, y)] = p["title"]
