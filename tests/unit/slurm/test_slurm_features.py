"""The per-release table (burstd.slurm.features): each difference decided from the version, and the docs'
table says the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from burstd.slurm.features import FEATURES, Features, format_release, parse_release

DOC = Path(__file__).resolve().parents[3] / "docs" / "slurm-adapter.md"


@pytest.mark.parametrize(("release", "present", "absent"), [
    ("22.05.8", {"cloud_reg_addrs"},
     {"scontrol_json", "power_verb", "instance_fields", "requeue_on_resume_failure", "expedited_requeue"}),
    ("24.11.5", {"scontrol_json", "power_verb", "instance_fields", "rest_node_actions"},
     {"cloud_reg_addrs", "power_reason", "requeue_on_resume_failure", "expedited_requeue", "rest_requeue"}),
    ("25.05.0", {"requeue_on_resume_failure", "power_verb"}, {"expedited_requeue", "cloud_reg_addrs"}),
    ("26.05.5", {"power_verb", "power_reason", "requeue_on_resume_failure", "expedited_requeue", "rest_requeue",
                 "instance_fields"}, {"cloud_reg_addrs"}),
])
def test_each_release_gets_what_it_has(release, present, absent):
    feats = Features.of(release)
    assert present <= set(feats.present())
    assert not absent & set(feats.present())


def test_releases_parse_from_what_slurm_prints():
    assert parse_release("slurm-wlm 26.05.5") == (26, 5)
    assert parse_release("slurm 24.11.5") == (24, 11)
    assert format_release((26, 5)) == "26.05"
    with pytest.raises(ValueError):
        parse_release("no version")


def test_an_unknown_feature_is_an_error_not_a_silent_false():
    with pytest.raises(KeyError):
        Features.of("24.11").has("power_verbs")


def test_the_docs_table_lists_every_feature_with_its_releases():
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| `(\w+)` \| ([^|]*) \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    for f in FEATURES:
        assert f.key in rows, f"docs/slurm-adapter.md has no row for {f.key}"
        since = format_release(f.since) if f.since else "all"
        until = format_release(f.until) if f.until else "-"
        assert rows[f.key] == (since, until), f.key
