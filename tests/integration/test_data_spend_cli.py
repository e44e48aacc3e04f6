"""Issue 24 item 5 through the real burstctl, against the daemon's real API over its socket and a real SQLite
Store: data costs booked the way the transfer engine books them show by kind in ``burstctl spend``, its plot,
the budget and the metrics."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config import parse_config
from burstd.daemon.data_spend import book_storage, book_transfer
from tests.integration.live_api import POOL, live_api


@pytest.fixture
def live(tmp_path):
    with live_api(tmp_path) as parts:
        yield parts


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_data_spend_shows_by_kind_in_spend_plot_budget_and_metrics(live, tmp_path):
    path, rec, store, _adapter, _provider, clock = live
    priced = parse_config({"pools": [{**POOL, "data": {"transfer_in_per_gb": 0.09, "transfer_out_per_gb": 0.12,
                                                       "storage_per_gb_month": 0.023}}]})
    now = clock()
    book_transfer(store, priced, key="job11-in", account="chem", pool="local", n_bytes=50 * 10**9, direction="in",
                  job_id=11, user="ann", at=now, metrics=rec.metrics)  # $4.50
    book_transfer(store, priced, key="job11-out", account="chem", pool="local", n_bytes=10 * 10**9,
                  direction="out", job_id=11, user="ann", at=now + 1, metrics=rec.metrics)  # $1.20
    book_storage(store, priced, key="cache-local-1", account="bio", pool="local", n_bytes=100 * 10**9,
                 seconds=30 * 86400, at=now + 2, metrics=rec.metrics)  # $2.30

    data = json.loads(cli("spend", "--by", "kind", "--json", "-c", path).output)
    assert {r["key"]: r["spend_micro_usd"] for r in data["rows"]} == {
        "transfer_in": 4_500_000, "storage": 2_300_000, "transfer_out": 1_200_000}
    by_acct = json.loads(cli("spend", "--json", "-c", path).output)
    assert {r["key"]: r["spend_micro_usd"] for r in by_acct["rows"]} == {"chem": 5_700_000, "bio": 2_300_000}
    table = " ".join(cli("spend", "--by", "kind", "-c", path).output.split())
    assert "transfer_in" in table and "$4.50" in table and "$8.00" in table, table
    # counted against the account's budget like compute
    shown = " ".join(cli("budget", "show", "-c", path).output.translate({ord(c): " " for c in "│┃"}).split())
    assert "chem $10.00 $5.70" in shown, shown
    out = tmp_path / "kinds.html"
    r = cli("spend", "--by", "kind", "--plot", str(out), "-c", path)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "<td>transfer_in</td>" in page and "<td>storage</td>" in page
    metrics = rec.metrics.render().decode()
    assert 'burstd_data_spend_usd_total{kind="transfer_in",pool="local"} 4.5' in metrics
    assert 'burstd_data_bytes_total{direction="out",pool="local"} 1e+10' in metrics
    assert cli("spend", "--by", "color", "-c", path).exit_code == 2
