"""``burstctl doctor``'s probes (issue 26): burstd's database opens and its schema is at this burstd's Alembic head,
Prometheus can scrape the metrics endpoint, the clouds' credential chains find credentials. Real SQLite databases
migrated by the real Store, a real metrics server; each non-ok finding says how to fix it."""

from __future__ import annotations

import json
import socket
import sqlite3

import boto3
import google.auth
import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.db.engine import schema_revisions
from burstd.db.store import Store
from burstd.report.preflight import credential_findings, database_finding, http_get, metrics_finding

AWS = {"name": "aws", "provider": "aws", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
       "aws": {"region": "us-east-1", "launch_template": "lt-1", "subnets": ["subnet-1"]},
       "instance_types": [{"name": "c5.large", "cpus": 2, "memory_mb": 4096}], "price_per_hour": 0.05}
GCP = {"name": "gcp", "provider": "gcp", "partition": "gcloud", "node_prefix": "gcloud", "node_count": 2,
       "gcp": {"project": "p", "region": "us-central1", "zones": ["us-central1-a"], "instance_template": "t"},
       "instance_types": [{"name": "n2", "cpus": 2, "memory_mb": 4096}], "price_per_hour": 0.05}


# ------------------------------------------------------------------------------------------------ the database
def test_a_database_at_the_current_schema_passes(tmp_path):
    url = f"sqlite:///{tmp_path}/burstd.db"
    Store.open(url).close()
    f = database_finding(url, schema_revisions)
    assert f.level == "ok" and schema_revisions(url)[1] in f.detail


def test_no_database_yet_warns_and_the_probe_makes_no_file(tmp_path):
    f = database_finding(f"sqlite:///{tmp_path}/none.db", schema_revisions)
    assert f.level == "warn" and "start burstd" in f.fix
    assert not (tmp_path / "none.db").exists()


def test_an_older_schema_fails_with_restart_to_migrate_and_a_newer_one_with_upgrade(tmp_path):
    url = f"sqlite:///{tmp_path}/burstd.db"
    Store.open(url).close()
    _, head, known = schema_revisions(url)
    older = sorted(known)[-2]
    with sqlite3.connect(tmp_path / "burstd.db") as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (older,))
    f = database_finding(url, schema_revisions)
    assert f.level == "fail" and f"revision {older}, this burstd needs {head}" in f.detail
    assert "restart burstd" in f.fix and "migrates" in f.fix
    with sqlite3.connect(tmp_path / "burstd.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999_future'")
    f = database_finding(url, schema_revisions)
    assert f.level == "fail" and "unknown to this burstd" in f.detail and "upgrade burstd" in f.fix


def test_a_database_without_burstds_schema_fails(tmp_path):
    sqlite3.connect(tmp_path / "other.db").close()
    f = database_finding(f"sqlite:///{tmp_path}/other.db", schema_revisions)
    assert f.level == "fail" and "no burstd schema" in f.detail and "start burstd once" in f.fix


def test_a_database_that_cannot_be_reached_fails_without_printing_its_password():
    def refused(url):
        raise ConnectionRefusedError(f"connection to {url} refused")  # a driver may quote the URL whole

    url = "postgresql+psycopg://burstd:s3cret@db.example:5432/burstd"
    f = database_finding(url, refused)
    assert f.level == "fail" and "cannot read postgresql+psycopg://burstd:***@db.example:5432/burstd" in f.detail
    assert "database.url" in f.fix


# ------------------------------------------------------------------------------------------------ the metrics
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_metrics_port_warns_that_prometheus_cannot_scrape():
    f = metrics_finding(parse_config({}), daemon_up=True, fetch=lambda url: pytest.fail("nothing to fetch"))
    assert f.level == "warn" and "Prometheus cannot scrape" in f.detail and "daemon.metrics_port" in f.fix


def test_the_metrics_endpoint_is_scraped_for_real_when_the_daemon_runs():
    from burstd.daemon.metrics import Metrics

    port = _free_port()
    server = Metrics().serve(port, "127.0.0.1")
    try:
        cfg = parse_config({"daemon": {"metrics_port": port, "metrics_address": "0.0.0.0"}})
        f = metrics_finding(cfg, daemon_up=True, fetch=http_get)
        assert f.level == "ok" and f"http://127.0.0.1:{port}/metrics" in f.detail
    finally:
        server.shutdown()
        server.server_close()
    f = metrics_finding(cfg, daemon_up=True, fetch=http_get)  # nothing listens now
    assert f.level == "fail" and f.fix
    assert metrics_finding(cfg, daemon_up=False, fetch=http_get).level == "warn"  # not checked: says so


def test_a_port_answering_without_burstds_metrics_fails():
    cfg = parse_config({"daemon": {"metrics_port": 9464}})
    f = metrics_finding(cfg, daemon_up=True, fetch=lambda url: (200, "<html>grafana</html>"))
    assert f.level == "fail" and "another service holds the port" in f.fix


# ------------------------------------------------------------------------------------------------ credentials
class _Session:
    creds: object = None

    def get_credentials(self):
        return self.creds


def test_aws_credentials_found_missing_or_broken(monkeypatch):
    cfg = parse_config({"pools": [AWS]})
    monkeypatch.setattr(_Session, "creds", object())
    monkeypatch.setattr(boto3, "Session", _Session)
    assert [(f.check, f.level) for f in credential_findings(cfg)] == [("AWS credentials", "ok")]
    monkeypatch.setattr(_Session, "creds", None)
    [f] = credential_findings(cfg)
    assert f.level == "fail" and "instance role" in f.detail and "AWS_PROFILE" in f.fix

    def broken():
        raise ValueError("profile 'burst' not found in ~/.aws/config")

    monkeypatch.setattr(boto3, "Session", broken)
    [f] = credential_findings(cfg)
    assert f.level == "fail" and "profile 'burst' not found" in f.detail and "docs/clouds.md" in f.fix


def test_gcp_credentials_found_or_missing_and_no_cloud_pool_checks_nothing(monkeypatch):
    cfg = parse_config({"pools": [GCP]})
    monkeypatch.setattr(google.auth, "default", lambda: (object(), "p"))
    assert [(f.check, f.level) for f in credential_findings(cfg)] == [("GCP credentials", "ok")]

    def missing():
        raise google.auth.exceptions.DefaultCredentialsError("Your default credentials were not found.\nSee ...")

    monkeypatch.setattr(google.auth, "default", missing)
    [f] = credential_findings(cfg)
    assert f.level == "fail" and f.detail == "Your default credentials were not found."
    assert "GOOGLE_APPLICATION_CREDENTIALS" in f.fix
    assert credential_findings(parse_config({})) == []


# ------------------------------------------------------------------------------------------------ the command
def test_doctor_runs_the_database_and_metrics_probes_and_every_problem_says_its_fix(tmp_path):
    db = tmp_path / "burstd.db"
    cfg = tmp_path / "burstd.toml"
    cfg.write_text(f'[slurm]\nbin_dir = "{tmp_path}/nobin"\n[daemon]\nstate_dir = "{tmp_path}/state"\n'
                   f'[api]\nsocket = "{tmp_path}/run/burstd.sock"\n[database]\nurl = "sqlite:///{db}"\n')
    r = CliRunner().invoke(app, ["doctor", "-c", str(cfg), "--json"])
    assert r.exit_code == 1, r.output  # slurmctld cannot be asked: a failure
    found = {f["check"]: f for f in json.loads(r.stdout)}
    assert found["database"]["level"] == "warn" and not db.exists()
    assert found["metrics"]["level"] == "warn" and "Prometheus cannot scrape" in found["metrics"]["detail"]
    assert all(f["fix"] for f in found.values() if f["level"] != "ok"), found
