"""The PromQL expressions shipped in monitoring/: every alert rule's and every dashboard panel's, with the
metric names each one reads (shared by the unit check and the live Prometheus test)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

MONITORING = Path(__file__).resolve().parent.parent / "monitoring"
RULES = MONITORING / "burstd-alerts.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"

_FUNCS = {"sum", "max", "min", "avg", "by", "on", "rate", "increase", "histogram_quantile", "time", "le", "or",
          "and", "unless", "count", "without", "ignoring", "group_left", "group_right", "abs", "absent"}


def alert_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"] if "alert" in r}


#: What Grafana puts for the dashboard's variables when "All" is chosen (each variable's ``allValue``)
VARIABLES = {"$pool": ".*", "$account": ".*"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def with_variables(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def panel_exprs() -> dict[str, str]:
    """Every panel target's expression, the variables set to "All"."""
    return {f"{p['title']} [{t['refId']}]": with_variables(t["expr"]) for p in dashboard()["panels"]
            for t in p.get("targets", [])}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (label names, label values and functions left out)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)  # drop label matchers
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # and range windows
    bare = re.sub(r"\b(by|on|without|ignoring)\s*\([^)]*\)", "", bare)  # and grouping label lists
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if w not in _FUNCS and not w.isdigit()
            and (w.startswith("burstd_") or w == "up")}
