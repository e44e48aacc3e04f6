"""Where admins already look, on a bursting bed: a real Prometheus (Debian's package) scrapes the real daemon
while jobs burst, loads monitoring/burstd-alerts.yml, and every dashboard panel's and alert's expression is
evaluated through its HTTP API. A panel or alert naming a metric the daemon does not export finds no data and
fails here.

The same daemon run then answers the admin's CLI as a new admin would use it: spend in dollars by the one money
rule and its plot against the budgets, events by a lease-id prefix, leases with whole ids.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.testbed.procs import free_port
from burstd.unix_http import unix_transport
from tests.integration.daemon_bed import (
    Gate,
    all_jobs,
    bed_daemon_config,
    diagnosis,
    leases,
    running_daemon,
    wait_for,
)
from tests.monitoring_exprs import (
    RULES,
    alert_exprs,
    dashboard,
    metric_names,
    panel_exprs,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("prometheus"),
                                 reason="prometheus: Debian package prometheus (scripts/install-deps.sh)")]


@contextlib.contextmanager
def prometheus(work: Path, target_port: int):
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{RULES}]\n"
        "scrape_configs:\n"
        "  - job_name: burstd\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n")
    log = open(work / "prometheus.log", "wb")
    proc = subprocess.Popen(["prometheus", f"--config.file={work / 'prometheus.yml'}",
                             f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url), 60, "Prometheus ready",
                 diagnose=lambda: (work / "prometheus.log").read_text()[-2000:])
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(url: str, expr: str) -> list:
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert r["status"] == "success", (expr, r)
    return r["data"]["result"]


def young_collections(metrics_port: int) -> float:
    """The daemon's collector: how many passes over its youngest generation so far (its own /metrics)."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return next(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                if s.name == "python_gc_collections_total" and s.labels == {"generation": "0"})


def test_prometheus_sees_every_panel_and_alert_of_a_bursting_bed_and_the_cli_reads_it(slurm_bed, bed_user, tmp_path):
    metrics_port = free_port()
    # the bed's VMs share the head's munged, so a job's report is sealed on the head (tests/unit/daemon/
    # test_job_progress.py proves the node check)
    cfg_path = bed_daemon_config(slurm_bed, tmp_path / "burstd", daemon={"metrics_port": metrics_port},
                                 api={"progress_require_node": False})
    panels, alerts = panel_exprs(), alert_exprs()
    with running_daemon(slurm_bed, cfg_path, tmp_path / "burstd.log") as daemon, \
            prometheus(tmp_path / "prom", metrics_port) as prom:
        collected_at_start = young_collections(metrics_port)
        gate = Gate(slurm_bed, bed_user)
        n = len(slurm_bed.onprem_nodes) + 2  # two whole-node jobs more than on-prem holds: two burst
        jobs = [slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-N", "1", "-n", "2", "-t", "10",
                                  "-o", "out-%j.txt"], gate.script(), user=bed_user) for _ in range(n)]
        diagnose = diagnosis(slurm_bed, jobs, cfg_path, daemon)
        wait_for(all_jobs(slurm_bed, jobs, "RUNNING"), 200, "every job RUNNING (two on cloud)", diagnose=diagnose)
        # a training job's progress report as burstd.train sends it (a MUNGE credential its user seals, the
        # report its payload), for a job running on a cloud node: the training panels have data too
        on_cloud = next(j for j in jobs if slurm_bed.job(j).get("NodeList") in slurm_bed.cloud_nodes)
        report = json.dumps({"job": on_cloud, "step": 120, "step_time_s": 0.5, "steps_per_epoch": 100,
                             "gpu_util": [50.0]})

        def send() -> httpx.Response | None:  # a credential is good once: each try seals a new one
            sealed = subprocess.run(["runuser", "-u", bed_user, "--", "munge"], input=report.encode(), check=True,
                                    capture_output=True, timeout=30).stdout.decode().strip()
            with httpx.Client(transport=unix_transport(daemon.socket), base_url="http://burstd", timeout=30) as c:
                r = c.post(f"/v1/jobs/{on_cloud}/progress", headers={"Authorization": f"Munge {sealed}"})
            return r if r.status_code == 202 else None  # 403 until the daemon's snapshot shows the job running

        said = wait_for(send, 60, f"job {on_cloud}'s progress report taken", interval=2, diagnose=diagnose)
        assert said.json()["cost_per_epoch_micro_usd"] > 0, said.text

        def gaps() -> list[str]:
            # every panel evaluates and has data, the training ones from the report above
            out = [name for name, expr in panels.items() if not query(prom, expr)]
            for name, expr in alerts.items():
                query(prom, expr)  # evaluates without error (an alert that does not fire answers empty)
                out += [f"{name}: {m}" for m in metric_names(expr) if not query(prom, m)]
            return out

        wait_for(lambda: not gaps(), 90, "data for every panel and every metric an alert reads",
                 interval=3, diagnose=lambda: f"no data for: {gaps()}")
        # the dashboard's pool and account variables find their values (Grafana asks label_values(metric, label))
        for var in dashboard()["templating"]["list"]:
            if var["type"] == "query":
                metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["definition"]).groups()
                assert query(prom, f"group by ({label}) ({metric})"), var["name"]
        # the rules are loaded and evaluate cleanly; none fires on a healthy bed
        groups = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        assert set(rules) == set(alerts), rules.keys()
        wait_for(lambda: all(r.get("lastEvaluation", "").startswith("2") for r in
                             (x for g in httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
                              for x in g["rules"])), 30, "every rule evaluated")
        bad = {n: r.get("lastError") for n, r in rules.items() if r.get("health") not in ("ok", "unknown")}
        assert not bad, bad
        assert not query(prom, 'ALERTS{alertstate="firing"}'), query(prom, "ALERTS")
        cloud = query(prom, 'sum(burstd_leases{state="READY"})')
        assert float(cloud[0]["value"][1]) >= 2, cloud
        assert float(query(prom, "sum(burstd_budget_spent_usd)")[0]["value"][1]) > 0
        # the collector, paused while the daemon started (burstd.start_up), runs in the daemon that cycles
        assert young_collections(metrics_port) > collected_at_start, "no collection since the daemon started"

        gate.open()
        wait_for(all_jobs(slurm_bed, jobs, "COMPLETED"), 120, "every job COMPLETED", diagnose=diagnose)

        # the admin's CLI on the same run
        def cli(*args: str):
            r = CliRunner().invoke(app, [*args, "-c", str(cfg_path)])
            return r.exit_code, r.output

        rows = leases(cfg_path)
        lease_id = rows[0]["lease_id"]
        code, out = cli("events", "--lease", lease_id[:8], "--json")
        assert code == 0 and {e["lease_id"] for e in json.loads(out)} == {lease_id}, out
        code, out = cli("leases", "--all", "--wide")  # whole ids (at 80 columns: unique prefixes)
        assert code == 0 and lease_id in out, out
        day = time.strftime("%Y-%m-%d", time.gmtime())
        code, out = cli("spend", "--by", "account", "--since", day, "--json")
        assert code == 0 and json.loads(out)["total_micro_usd"] > 0, out
        png = tmp_path / "spend.png"
        code, out = cli("spend", "--since", "1h", "--plot", str(png))
        assert code == 0 and png.read_bytes()[:4] == b"\x89PNG", out
