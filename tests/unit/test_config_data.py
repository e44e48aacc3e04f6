"""The data keys of the config (issue 24 item 4): [pools.data] and [data], with errors naming the key and file."""

from __future__ import annotations

import pytest

from burstd.config import ConfigError, load_config

POOL = """
[[pools]]
name = "aws-spot"
provider = "local"
partition = "cloud"
node_prefix = "c"
node_count = 2
price_per_hour = 1.0
instance_types = [{name = "t", cpus = 4, memory_mb = 8000}]
"""


def write(tmp_path, text):
    p = tmp_path / "burstd.toml"
    p.write_text(text)
    return p


def test_pool_link_and_prices_and_never_leave_rules_load(tmp_path):
    cfg = load_config(write(tmp_path, POOL + """
[pools.data]
link_mbps = 1000
transfer_in_per_gb = 0.09
transfer_out_per_gb = 0.12
storage_per_gb_month = 0.023
cache_gb = 2000

[data]
never_leave_paths = ["/proj/clinical"]
never_leave_accounts = ["hipaa"]
"""))
    d = cfg.pools[0].data
    assert (d.link_mbps, d.transfer_in_per_gb, d.transfer_out_per_gb, d.storage_per_gb_month, d.cache_gb) == (
        1000, 0.09, 0.12, 0.023, 2000)
    assert cfg.data.never_leave_paths == ["/proj/clinical"] and cfg.data.never_leave_accounts == ["hipaa"]
    plain = load_config(write(tmp_path, POOL))
    assert plain.pools[0].data.link_mbps is None and plain.data.never_leave_accounts == []


@pytest.mark.parametrize("section, words", [
    ("[pools.data]\nlink_mbps = 0\n", "pools[0].data.link_mbps"),
    ("[pools.data]\ntransfer_out_per_gb = -1\n", "pools[0].data.transfer_out_per_gb"),
    ("[pools.data]\negress = 1\n", "pools[0].data.egress"),
    ("[data]\nnever_leave_paths = [\"relative\"]\n", "data.never_leave_paths"),
    ("[data]\nnever_leave_accounts = [\"bad name\"]\n", "data.never_leave_accounts"),
])
def test_bad_data_keys_name_the_key_and_the_file(tmp_path, section, words):
    path = write(tmp_path, POOL + section)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert words in str(err.value) and str(path) in str(err.value)


def test_data_user_python_is_an_absolute_path(tmp_path):
    cfg = load_config(write(tmp_path, POOL + '[data]\nuser_python = "/opt/burstd/bin/python3"\n'))
    assert cfg.data.user_python == "/opt/burstd/bin/python3"
    with pytest.raises(ConfigError, match="data.user_python"):
        load_config(write(tmp_path, POOL + '[data]\nuser_python = "python3"\n'))
