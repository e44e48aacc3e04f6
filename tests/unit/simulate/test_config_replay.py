"""`burstctl simulate --config FILE` replays what that daemon would do, and one set of defaults serves both."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.config_policy import WaitingPolicy
from burstd.simulate.policies import default_site, make_setup, policy_config
from burstd.simulate.settings import STARBURST
from burstd.simulate.traces import TraceInfo
from tests.unit.simulate.test_simulate_cli import SWF, calm_spot_traces

BURSTD_KNOBS = ("min_expected_wait_s", "burstd_min_wait_s", "burstd_wait_per_node_hour_s", "wait_value_per_hour",
                "max_wait_to_limit_ratio", "wait_to_runtime_ratio", "keep_fraction")

SITE_TOML = """
[[pools]]
name = "aws-cpu"
provider = "local"
partition = "cloud"
node_prefix = "c"
node_count = 50
market = "spot"
price_per_hour = 0.1
ondemand_price_per_hour = 0.4
instance_types = [{ name = "c5.2xlarge", cpus = 8, memory_mb = 16384 }]

[budget]
default_account_usd = 100000

[policy.waiting]
kind = "{kind}"
min_wait_s = 0
"""


def test_the_built_in_sites_run_the_daemons_burstd_defaults():
    daemon = WaitingPolicy()
    for cfg in (default_site(False), default_site(True), STARBURST.config()):
        w = cfg.policy.waiting
        assert {k: getattr(w, k) for k in BURSTD_KNOBS} == {k: getattr(daemon, k) for k in BURSTD_KNOBS}
    assert (daemon.min_expected_wait_s, daemon.burstd_min_wait_s) == (300.0, 0.0)


def test_a_config_is_replayed_as_configured_and_the_built_in_burstd_row_stays_burstd(tmp_path):
    path = tmp_path / "burstd.toml"
    path.write_text(SITE_TOML.replace("{kind}", "constant"))
    from burstd.config import load_config

    cfg = load_config(path)
    setup = make_setup(TraceInfo("swf", 32, 4), False, cfg, None, None, None)
    assert setup.policy_as_configured
    assert policy_config(setup.config, "burstd", as_configured=True).policy.waiting.kind == "constant"
    builtin = make_setup(TraceInfo("swf", 32, 4), False, None, None, None, None)
    assert not builtin.policy_as_configured
    assert policy_config(builtin.config, "burstd").policy.waiting.kind == "burstd"


def test_the_header_says_what_is_replayed_and_every_assumption(tmp_path):
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    conf = tmp_path / "burstd.toml"
    conf.write_text(SITE_TOML.replace("{kind}", "burstd"))
    spot = calm_spot_traces(tmp_path / "spot")
    args = ["simulate", "--trace", str(trace), "--config", str(conf), "--policy", "never,burstd",
            "--spot-traces", str(spot)]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert str(conf) in rep["site"] and "waiting.kind burstd" in rep["site"]
    lines = rep["assumptions"]
    assert lines[0] == "site size: 32 on-prem CPUs (the trace header's MaxProcs)"
    assert lines[1].startswith("node shape: 8 CPUs a node (MaxProcs / MaxNodes")
    assert f"spot: preemptions drawn from the measured traces in {spot}" in lines[2]
    assert "time limits: all 79 jobs carry their requested limit" in lines[3]
    text = CliRunner().invoke(app, args + ["--wide"]).output
    assert "replays: the daemon's policy as" in text and "assumed site size: 32 on-prem CPUs" in text.replace("\n", " ")


def test_the_header_says_when_the_configs_budgets_keep_the_traces_accounts_home(tmp_path):
    # a config with no default_account_usd lets no account without a budget burst: a what-if on a trace whose
    # accounts the config does not name bursts nothing, and the header has to say why
    trace = tmp_path / "site.swf"
    trace.write_text(SWF)
    spot = calm_spot_traces(tmp_path / "spot")

    def run(toml: str) -> dict:
        conf = tmp_path / "burstd.toml"
        conf.write_text(toml)
        r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--config", str(conf), "--policy",
                                     "ondemand-all", "--spot-traces", str(spot), "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    funded = run(SITE_TOML.replace("{kind}", "burstd"))
    assert not any(line.startswith("budgets:") for line in funded["assumptions"])
    assert funded["policies"]["ondemand-all"]["jobs_burst"] > 0
    unfunded = run(SITE_TOML.replace("{kind}", "burstd").replace("default_account_usd = 100000\n", ""))
    assert unfunded["policies"]["ondemand-all"]["jobs_burst"] == 0
    assert ["budgets: 2 of the trace's 2 accounts have no [budget.accounts] entry and the config sets no "
            "default_account_usd, so their jobs never burst, as the daemon would treat them (set "
            "budget.default_account_usd to replay them bursting)"] == [
        line for line in unfunded["assumptions"] if line.startswith("budgets:")]
