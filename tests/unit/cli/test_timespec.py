"""One time parser for every ``--since``/``--until``: dates, date-times, ages and Unix times."""

from __future__ import annotations

import pytest

from burstd.cli.timespec import parse_when

NOW = 1_793_232_000.0  # 2026-10-29T00:00:00Z


@pytest.mark.parametrize("text, expected", [
    ("2026-11-01", 1_793_491_200.0),  # midnight UTC
    ("2026-11-01T08:30", 1_793_491_200.0 + 8.5 * 3600),
    ("2026-11-01T08:30+01:00", 1_793_491_200.0 + 7.5 * 3600),  # a named zone is honoured
    ("90m", NOW - 5400),
    ("12h", NOW - 12 * 3600),
    ("7d", NOW - 7 * 86400),
    ("2w", NOW - 14 * 86400),
    ("1793232000", 1_793_232_000.0),
    ("", None),
    (None, None),
])
def test_every_documented_form_is_read(text, expected):
    assert parse_when(text, now=NOW) == expected


@pytest.mark.parametrize("bad", ["last tuesday", "7y", "2026-13-01", "-"])
def test_bad_time_names_the_option_and_the_forms(bad):
    with pytest.raises(ValueError) as err:
        parse_when(bad, "--until", now=NOW)
    assert str(err.value).startswith(f"--until {bad!r}:") and "2026-11-01" in str(err.value) and "7d" in str(err.value)
