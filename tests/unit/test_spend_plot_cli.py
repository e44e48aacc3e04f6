"""``burstctl spend-plot``: reads the ledger from the configured database and writes the chart."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.cli.spend_cmd import parse_when
from burstd.db.store import Store
from burstd.domain.budget import SpendInterval

T0 = 1_773_144_000.0


def _setup(tmp_path):
    url = f"sqlite:///{tmp_path}/burstd.db"
    cfg = tmp_path / "burstd.toml"
    cfg.write_text(f'[database]\nurl = "{url}"\n')
    store = Store.open(url)
    lease = store.create_lease(pool="aws-a", node_name="n1", account="chem")
    store.add_spend([SpendInterval(lease.lease_id, "aws-a", "chem", T0, T0 + 3600, 1, 1_250_000, 7, "ann"),
                     SpendInterval(lease.lease_id, "aws-a", "bio", T0 + 3600, T0 + 7200, 1, 500_000, 8, "bob")])
    store.close()
    return cfg


def test_writes_html_and_reports_totals(tmp_path):
    cfg = _setup(tmp_path)
    out = tmp_path / "spend.html"
    r = CliRunner().invoke(app, ["spend-plot", str(out), "--since", str(T0), "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["totals_micros"] == {"chem": 1_250_000, "bio": 500_000} and data["total_micros"] == 1_750_000
    assert "data:image/png;base64," in out.read_text()
    r = CliRunner().invoke(app, ["spend-plot", str(tmp_path / "u.png"), "--by", "user", "--until",
                                 str(T0 + 3600), "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    assert "1 user(s), $1.25 in all" in r.output
    assert (tmp_path / "u.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_fail_clearly_and_write_nothing(tmp_path):
    cfg = _setup(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["spend-plot", str(tmp_path / "x.pdf"), "--config", str(cfg)])
    assert r.exit_code == 1 and "must end in .png or .html" in r.output
    r = runner.invoke(app, ["spend-plot", str(tmp_path / "x.png"), "--by", "qos", "--config", str(cfg)])
    assert r.exit_code == 1 and "--by 'qos'" in r.output
    r = runner.invoke(app, ["spend-plot", str(tmp_path / "x.png"), "--since", "last tuesday", "--config", str(cfg)])
    assert r.exit_code == 1 and "--since 'last tuesday'" in r.output
    missing = tmp_path / "other.toml"
    missing.write_text(f'[database]\nurl = "sqlite:///{tmp_path}/nope/burstd.db"\n')
    r = runner.invoke(app, ["spend-plot", str(tmp_path / "x.png"), "--config", str(missing)])
    assert r.exit_code == 1 and "no burstd database at" in r.output
    assert not (tmp_path / "nope").exists() and not list(tmp_path.glob("x.*"))


def test_parse_when_forms():
    assert parse_when("2026-03-10T12:00:00", "--since") == T0
    assert parse_when("2026-03-10T13:00:00+01:00", "--since") == T0
    assert parse_when("7d", "--since", now=T0 + 7 * 86400) == T0
    assert parse_when("90m", "--since", now=T0 + 5400) == T0
    assert parse_when(None, "--since") is None
