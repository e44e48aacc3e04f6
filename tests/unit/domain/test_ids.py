"""Ids by unique prefix: exact ids win, one match resolves, none or several is a clear error."""

from __future__ import annotations

import pytest

from burstd.domain.ids import IdError, unique_prefix

IDS = ["3f2a9c", "3f2b00", "a1b2c3", "a1"]


@pytest.mark.parametrize("prefix, expected",
                         [("3f2a", "3f2a9c"), ("a1b", "a1b2c3"), ("a1", "a1"), ("3f2b00", "3f2b00")])
def test_a_unique_prefix_or_exact_id_resolves(prefix, expected):
    assert unique_prefix(prefix, IDS) == expected


def test_an_ambiguous_prefix_names_the_candidates():
    with pytest.raises(IdError, match=r"lease id prefix '3f2' is ambiguous: it matches 3f2a9c, 3f2b00"):
        unique_prefix("3f2", IDS)


@pytest.mark.parametrize("prefix", ["ff", ""])
def test_an_unknown_or_empty_prefix_is_refused(prefix):
    with pytest.raises(IdError, match="instance"):
        unique_prefix(prefix, IDS, "instance")
