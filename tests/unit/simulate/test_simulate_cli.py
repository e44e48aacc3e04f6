"""burstctl simulate: the table per policy from a real trace slice; bad input is a clear error."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

import burstd
from burstd.cli.app import app
from burstd.simulate.spot import PACKAGED_TRACES

REPO = Path(__file__).resolve().parents[3]

SWF = ("; MaxProcs: 32\n; MaxNodes: 4\n" + "".join(
    f"{i} {i * 60} 0 {3600 + 600 * (i % 5)} {8 * (1 + i % 4)} -1 -1 -1 {7200 + 600 * (i % 5)} -1 1 {i % 3} "
    f"{i % 2} -1 1 -1 -1 -1\n" for i in range(1, 80)))


def calm_spot_traces(root):
    """Spot traces in the skypilot layout that never preempt."""
    for sub in ("preemption/1-node/aws-04-19-2023", "preemption/1-node/gcp-04-30-2023"):
        (root / sub).mkdir(parents=True)
        # 0 = alive in the authors' reading (spot.Reading), so this never preempts
        (root / sub / "z.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [0] * 100}))
    return root


def test_simulate_prints_every_metric_for_every_policy(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    plot = tmp_path / "frontier.png"
    spot = calm_spot_traces(tmp_path / "spot")
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--plot", str(plot),
                                 "--spot-traces", str(spot)])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["onprem_units"] == 32 and rep["jobs_read"] == 79
    assert list(rep["policies"]) == ["never", "ondemand-all", "spot-all", "constant-wait", "compute-wait", "burstd"]
    for name, row in rep["policies"].items():
        for m in ("cloud_cost_usd", "jobs", "jobs_burst", "wait_mean_s", "wait_p95_s", "jct_mean_s",
                  "bounded_slowdown_mean", "preemptions", "lost_node_hours"):
            assert m in row, (name, m)
        assert row["jobs"] == 79
    never, od = rep["policies"]["never"], rep["policies"]["ondemand-all"]
    assert never["cloud_cost_usd"] == 0 and od["cloud_cost_usd"] > 0 and od["cost_vs_ondemand_all"] == 1.0
    assert od["wait_mean_s"] < never["wait_mean_s"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name, row in rep["policies"].items():  # the honest measures, too
        for m in ("first_wait_mean_s", "delay_mean_s", "delay_p95_s", "jct_p95_s", "cost_by_market"):
            assert m in row, (name, m)
    assert "never" in rep["frontier"]  # free: nothing is cheaper


def test_policy_subset_and_limit(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--policy", "never,burstd",
                                 "--limit-jobs", "10", "--spot-traces", str(calm_spot_traces(tmp_path / "s"))])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert list(rep["policies"]) == ["never", "burstd"] and rep["jobs_read"] == 10


def test_garbage_trace_and_unknown_policy_are_clear_errors(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF + "this is not a job\n")
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json"])
    assert r.exit_code == 1 and "site.swf:82" in r.output and "18 fields" in r.output
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", "cheapest"])
    assert r.exit_code == 1 and "unknown policy cheapest" in r.output


@pytest.mark.parametrize("body", ["", "; MaxProcs: 32\n; a header and no job\n"])
def test_simulate_on_an_empty_trace_exits_non_zero_naming_the_file(tmp_path, body):
    """An empty trace is an error on the command line too, not an empty report with exit 0 (issue 9,
    item 11)."""
    trace = tmp_path / "empty.swf"
    trace.write_text(body)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json",
                                 "--spot-traces", str(calm_spot_traces(tmp_path / "spot"))])
    assert r.exit_code == 1, r.output
    assert "empty.swf" in r.stderr and "no jobs to simulate" in r.stderr
    assert r.stdout == ""  # no report a script could mistake for a result


def test_missing_spot_traces_are_a_clear_error(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--spot-traces", str(tmp_path)])
    assert r.exit_code == 1 and "no spot traces under" in r.output


def test_the_spot_traces_ship_with_burstd_and_need_no_folder_beside_it(tmp_path, monkeypatch):
    """Issue 27: from a fresh clone or an installed wheel, simulate finds its spot traces in the package."""
    monkeypatch.delenv("BURSTD_SPOT_TRACES", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing beside the working folder either
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--policy", "spot-all"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["spot_traces"] == str(PACKAGED_TRACES)
    assert PACKAGED_TRACES.is_relative_to(Path(burstd.__file__).parent)
    assert rep["spot_preemption_rate_per_node_hour"] == pytest.approx(2.60, abs=0.02)  # the measured CPU rate
    table = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", "spot-all"])
    assert table.exit_code == 0 and "spot preemptions drawn from" in table.output


def test_the_readme_simulate_example_runs_on_the_sample_the_repository_ships(monkeypatch):
    """Issue 27: the README's example replays a trace in the repository, from its root, with nothing beside it."""
    monkeypatch.delenv("BURSTD_SPOT_TRACES", raising=False)
    examples = re.findall(r"^burstctl (simulate --trace examples/\S+[^#\n]*)", (REPO / "README.md").read_text(), re.M)
    assert examples, "README.md has no simulate example on an in-repo trace"
    monkeypatch.chdir(REPO)
    for example in examples:
        r = CliRunner().invoke(app, shlex.split(example))
        assert r.exit_code == 0, (example, r.output)
        rep = json.loads(r.stdout)
        assert rep["jobs_read"] == 2000 and rep["spot_traces"] == str(PACKAGED_TRACES)
        assert rep["policies"]["ondemand-all"]["jobs_burst"] > 0 and rep["policies"]["spot-all"]["preemptions"] > 0


def test_burstd_spot_traces_overrides_and_a_missing_folder_is_an_error_not_a_calm_market(tmp_path, monkeypatch):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    calm = calm_spot_traces(tmp_path / "calm")
    monkeypatch.setenv("BURSTD_SPOT_TRACES", str(calm))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--policy", "spot-all"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["spot_traces"] == str(calm) and rep["spot_preemption_rate_per_node_hour"] == 0.0
    monkeypatch.setenv("BURSTD_SPOT_TRACES", str(tmp_path / "nowhere"))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--policy", "spot-all"])
    assert r.exit_code == 1 and r.stdout == ""
    assert f"spot traces {tmp_path / 'nowhere'}: not a folder" in r.stderr
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--spot-traces", str(tmp_path / "nowhere")])
    assert r.exit_code == 1 and "not a folder" in r.output


def test_market_on_demand_puts_every_pool_on_demand(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--market", "on-demand",
                                 "--spot-traces", str(calm_spot_traces(tmp_path / "s"))])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["market"] == "on-demand"
    for name, row in rep["policies"].items():
        assert set(row["cost_by_market"]) <= {"on-demand"}, name
        assert row["preemptions"] == 0
    # spot-all has no spot to use: it is ondemand-all
    assert rep["policies"]["spot-all"]["cloud_cost_usd"] == rep["policies"]["ondemand-all"]["cloud_cost_usd"] > 0


def test_market_spot_never_pays_on_demand_except_the_reference(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--json", "--market", "spot",
                                 "--spot-traces", str(calm_spot_traces(tmp_path / "s"))])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    for name, row in rep["policies"].items():
        if name != "ondemand-all":
            assert set(row["cost_by_market"]) <= {"spot"}, name
    assert set(rep["policies"]["ondemand-all"]["cost_by_market"]) == {"on-demand"}


def test_unknown_market_is_a_clear_error(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--market", "reserved"])
    assert r.exit_code == 1 and "unknown market 'reserved'" in r.output


def test_the_text_report_prints_paths_and_config_sections_as_they_are_not_as_markup(tmp_path):
    # a trace's name is the user's, and the header names the config's [[pools]], [policy] and [budget]: rich
    # markup would swallow the brackets
    trace = tmp_path / "site [bold]1.swf"
    trace.write_text(SWF)
    conf = tmp_path / "burstd.toml"
    conf.write_text('[[pools]]\nname = "aws"\nprovider = "local"\npartition = "cloud"\nnode_prefix = "c"\n'
                    'node_count = 10\nmarket = "spot"\nprice_per_hour = 0.1\nondemand_price_per_hour = 0.3\n'
                    '[[pools.instance_types]]\nname = "c5.2xlarge"\ncpus = 8\nmemory_mb = 16384\n'
                    '[budget]\ndefault_account_usd = 100\n')
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", "never,burstd", "--wide",
                                 "--config", str(conf), "--spot-traces", str(calm_spot_traces(tmp_path / "s"))],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "site [bold]1.swf" in r.output
    assert "[[pools]], [policy] and [budget]" in r.output
