"""Hypothesis example budgets: one switch for how hard the property tests search.

``BURSTD_HYPOTHESIS_PROFILE`` picks the profile (tests/conftest.py loads it for the session):

- ``ci`` (default, what ``scripts/test.sh`` runs): each property test runs the count written beside it (2,000 for
  the ledger's exactness). Not cut: a quarter of the count caught a rare rounding mutant of the ledger in only one
  of three seeds, and the property tests cost about half a minute of CPU in all (docs/testbed.md).
- ``deep``: ten times that count, and 1,000 instead of hypothesis's 100 for tests without one. For a change to
  the money path, the budget guard or a parser, run locally: ``BURSTD_HYPOTHESIS_PROFILE=deep pytest tests/unit``.

A test states its count once: ``@settings(max_examples=examples(2000), deadline=None)``.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILES = ("ci", "deep")
DEEP_FACTOR = 10  # deep runs this many times each test's ci count


def profile() -> str:
    """The profile named by ``BURSTD_HYPOTHESIS_PROFILE`` (default ``ci``); any other value is an error."""
    name = os.environ.get("BURSTD_HYPOTHESIS_PROFILE", "ci") or "ci"
    if name not in PROFILES:
        raise ValueError(f"BURSTD_HYPOTHESIS_PROFILE={name!r}: one of {', '.join(PROFILES)}")
    return name


def examples(ci: int) -> int:
    """How many examples a property test whose ci count is ``ci`` runs under the current profile."""
    return ci * DEEP_FACTOR if profile() == "deep" else ci


def load() -> None:
    """Register both profiles with hypothesis and load the chosen one (the default for tests without a count)."""
    settings.register_profile("ci", settings())
    settings.register_profile("deep", settings(max_examples=100 * DEEP_FACTOR))
    settings.load_profile(profile())
