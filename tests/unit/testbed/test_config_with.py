"""config_with edits a daemon config through tomlkit: keys land in the right table, the rest is kept."""

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstd.testbed.daemon_process import config_with

BASE = """# the bed's config
[daemon]
state_dir = "/s"  # where the lock lives
cycle_interval_s = 10

[[pools]]
name = "local"

[pools.local]
subnet = "10.0.0.0/24"

[policy]
onprem_partitions = ["onprem"]
"""


def test_a_set_key_is_replaced_and_the_rest_of_the_text_kept():
    out = config_with(BASE, {"daemon": {"cycle_interval_s": 2}})
    assert tomllib.loads(out)["daemon"] == {"state_dir": "/s", "cycle_interval_s": 2}
    assert "# the bed's config" in out and "# where the lock lives" in out


def test_missing_tables_are_added_and_nested_ones_land_under_their_parent():
    out = tomllib.loads(config_with(BASE, {"budget": {"default_account_usd": 100, "accounts": {"a": 1.5}},
                                           "policy.waiting": {"max_wait_s": 30}}))
    assert out["budget"] == {"default_account_usd": 100, "accounts": {"a": 1.5}}
    assert out["policy"] == {"onprem_partitions": ["onprem"], "waiting": {"max_wait_s": 30}}


def test_a_table_inside_an_array_of_tables_is_the_entry_that_has_it():
    out = tomllib.loads(config_with(BASE, {"pools.local": {"boot_delay_s": 0.5}}))
    assert out["pools"] == [{"name": "local", "local": {"subnet": "10.0.0.0/24", "boot_delay_s": 0.5}}]


def test_a_table_no_array_entry_has_is_refused_by_name():
    with pytest.raises(ValueError, match=r"\[pools.gcp\]"):
        config_with(BASE, {"pools.gcp": {"project": "p"}})


@given(st.text(), st.lists(st.text(), max_size=3))
def test_any_string_is_written_as_that_string(value, items):
    out = tomllib.loads(config_with(BASE, {"database": {"url": value, "tags": items}}))
    assert out["database"] == {"url": value, "tags": items}
