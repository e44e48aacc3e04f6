"""``burstctl demo --ha`` pieces that need no bed: the two heads' configs, the duplicate count, the summary rows."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from burstd.cli import demo_watch
from burstd.cli.demo_ha import LEASE_S, RENEW_S, duplicates, ha_configs
from burstd.config import load_config
from burstd.testbed.config import BedConfig
from burstd.testbed.render import burstd_toml


def test_two_heads_share_database_and_vms_but_not_sockets_and_point_agents_at_each_other(tmp_path):
    base = tmp_path / "bed.toml"
    base.write_text(burstd_toml(BedConfig.from_env(None)))
    url = "postgresql+psycopg2://postgres@/postgres?host=/tmp/x/sock&port=5439"
    a, b = (load_config(p) for p in ha_configs(SimpleNamespace(burstd_config=base), tmp_path / "w", url, 3))
    bed_socket = load_config(base).api.socket
    assert a.api.socket == bed_socket != b.api.socket  # the hooks call head-a, the standby
    assert a.database.url == b.database.url == url
    assert a.ha.enabled and b.ha.enabled and (a.ha.node_id, b.ha.node_id) == ("head-a", "head-b")
    assert a.ha.lease_s == LEASE_S and a.ha.renew_interval_s == RENEW_S
    assert a.pools[0].local.records_dir == b.pools[0].local.records_dir  # one "cloud" for both
    assert a.daemon.state_dir != b.daemon.state_dir
    assert a.agent.standby_daemon_urls == [f"unix:{b.api.socket}"]
    assert b.agent.standby_daemon_urls == [f"unix:{a.api.socket}"]


def _inst(lease: str, gone: bool = False):
    return SimpleNamespace(lease_id=lease, is_gone=gone)


def test_duplicates_count_extra_vms_per_lease_and_extra_open_leases_per_node():
    assert duplicates([_inst("a"), _inst("b")], [{"node_name": "c1"}, {"node_name": "c2"}]) == 0
    assert duplicates([_inst("a"), _inst("a"), _inst("a", gone=True)], []) == 1
    assert duplicates([], [{"node_name": "c1"}, {"node_name": "c1"}]) == 1


def test_summary_shows_the_ha_rows_only_when_present():
    plain = {"jobs_submitted": 4, "jobs_completed": 4, "jobs_on_cloud": 2, "jobs_on_prem": 2,
             "leases_by_state": {}, "leaked_vms": 0, "finished": True, "slurm_version": "22.05.8",
             "accounting": False}
    out = Console(width=100, force_terminal=False, record=True)
    out.print(demo_watch.summary_table(plain))
    assert "failover" not in out.export_text()
    out = Console(width=100, force_terminal=False, record=True)
    out.print(demo_watch.summary_table({**plain, "leader_killed": "head-b", "failover_s": 7.1,
                                      "failover_bound_s": 8.0, "duplicate_vms": 0}))
    text = out.export_text()
    assert "standby led after (s)" in text and "7.1" in text and "duplicate VMs" in text and "head-b" in text
