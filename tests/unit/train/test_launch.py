"""burstd.train.launch: a preemption's planned exit is quiet, every other failure reads as torchrun's."""

from __future__ import annotations

import logging
import signal

import pytest

from burstd.train.launch import _PlannedStopFilter, planned_stop


@pytest.mark.parametrize("codes, planned", [
    ([85, 85], True),
    ([85, -15], True),      # the peer torchrun stopped on its way out
    ([85], True),
    ([1, 85], False),       # the first to fail crashed
    ([85, 1], False),       # a peer crashed
    ([-9, 85], False),      # the first was killed (OOM killer): a real failure
    ([], False),
])
def test_planned_stop(codes, planned):
    assert planned_stop(codes, 85) is planned


def _record(msg, *args):
    return logging.LogRecord("torch.distributed.elastic.multiprocessing.api", logging.ERROR, __file__, 1, msg,
                             args, None)


def test_filter_drops_only_the_planned_stop_lines_and_holds_the_stopping_of_peers():
    f = _PlannedStopFilter(85, signal.SIGUSR1)
    assert not f.filter(_record("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", 85, 0, 1, "x"))
    assert not f.filter(_record("Received %s death signal, shutting down workers", signal.SIGUSR1))
    assert not f.filter(_record("Sending process %s closing signal %s", 12, "SIGUSR1"))
    assert f.filter(_record("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", 1, 0, 1, "x"))
    assert f.filter(_record("Received %s death signal, shutting down workers", signal.SIGTERM))
    assert not f.filter(_record("Sending process %s closing signal %s", 12, "SIGTERM"))  # held, see below
    assert len(f.held) == 1


def test_lines_about_stopping_the_other_workers_are_held_and_released_for_a_real_failure():
    logger = logging.getLogger("burstd.test.launch")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    f = _PlannedStopFilter(85, signal.SIGUSR1)
    logger.addFilter(f)
    try:
        logger.warning("Sending process %s closing signal %s", 12, "SIGTERM")
        logger.warning("something else")
        assert seen == ["something else"]
        f.release()
        assert seen == ["something else", "Sending process 12 closing signal SIGTERM"]
        assert f.held == []
    finally:
        logger.removeFilter(f)
        logger.removeHandler(handler)
