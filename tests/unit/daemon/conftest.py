"""Every daemon unit test fails when a cycle step logged an unexpected exception (a bug, not the weather:
``burstd.daemon.cycle_errors``). The daemon survives such a step and counts it, which is right in production and
wrong in a test: a broad ``except`` must not hide a broken seam behind a passing test.

A test that provokes a bug on purpose (to check the cycle survives it) takes the records with the
``unexpected_cycle_errors`` fixture and asserts on them itself."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from burstd.daemon.cycle_errors import UNEXPECTED_FIELD
from burstd.daemon.logging import fields_of


class UnexpectedErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.claimed = False  # a test took them: it asserts on them itself

    def emit(self, record: logging.LogRecord) -> None:
        if fields_of(record).get(UNEXPECTED_FIELD):
            self.records.append(record)

    def lines(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()} {fields_of(r)}" for r in self.records]


@pytest.fixture(autouse=True)
def _no_unexpected_cycle_errors() -> Iterator[UnexpectedErrors]:
    collector = UnexpectedErrors()
    logger = logging.getLogger("burstd")
    logger.addHandler(collector)
    try:
        yield collector
    finally:
        logger.removeHandler(collector)
    if collector.records and not collector.claimed:
        pytest.fail(f"{len(collector.records)} unexpected exception(s) inside the daemon's cycle (a bug the "
                    "daemon survived and logged):\n" + "\n".join(collector.lines()[:10]), pytrace=False)


@pytest.fixture
def unexpected_cycle_errors(_no_unexpected_cycle_errors: UnexpectedErrors) -> UnexpectedErrors:
    """For a test that provokes a bug on purpose: the records, which it checks instead of the autouse fixture."""
    _no_unexpected_cycle_errors.claimed = True
    return _no_unexpected_cycle_errors


@pytest.fixture(scope="session")
def aws():
    """AWS's side of a node's identity: a key and certificate that sign identity documents as IMDS serves them
    (``tests.fakes.instance_identity``)."""
    from tests.fakes.instance_identity import AwsIdentity

    return AwsIdentity()


@pytest.fixture(scope="session")
def google():
    """Google's side: the keys that sign instance identity tokens, and the certs map Google serves."""
    from tests.fakes.instance_identity import GoogleIdentity

    return GoogleIdentity()
