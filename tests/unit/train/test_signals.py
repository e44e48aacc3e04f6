"""Signal handlers only set a flag; names parse clearly; the requeue code is validated."""

from __future__ import annotations

import os
import signal

import pytest

from burstd.train.signals import install_handlers, parse_signal, preempt_signal_from_env, requeue_exit_code


@pytest.mark.parametrize("text", ["SIGUSR1", "USR1", "usr1", " SIGUSR1 ", str(int(signal.SIGUSR1)),
                                  int(signal.SIGUSR1), signal.SIGUSR1])
def test_parse_signal_accepts_common_spellings(text):
    assert parse_signal(text) is signal.SIGUSR1


@pytest.mark.parametrize("text", ["SIGNOPE", "", "999"])
def test_parse_signal_rejects_unknown(text):
    with pytest.raises(ValueError, match="signal"):
        parse_signal(text)


def test_handler_sets_flag_and_uninstall_restores_previous_handlers():
    before_usr1, before_term = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)
    flag = install_handlers()
    try:
        assert not flag.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flag.requested and flag.signum == signal.SIGUSR1 and flag.received_at is not None
        first = flag.received_at
        os.kill(os.getpid(), signal.SIGTERM)  # a later signal keeps the first one's record
        assert flag.signum == signal.SIGUSR1 and flag.received_at == first
    finally:
        flag.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before_usr1
    assert signal.getsignal(signal.SIGTERM) == before_term


def test_preempt_signal_is_configurable(monkeypatch):
    monkeypatch.setenv("BURSTD_PREEMPT_SIGNAL", "SIGUSR2")
    assert preempt_signal_from_env() is signal.SIGUSR2
    flag = install_handlers()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert flag.requested and flag.signum == signal.SIGUSR2
    finally:
        flag.uninstall()


def test_requeue_exit_code_default_and_validation(monkeypatch):
    monkeypatch.delenv("BURSTD_REQUEUE_EXIT_CODE", raising=False)
    assert requeue_exit_code() == 85
    monkeypatch.setenv("BURSTD_REQUEUE_EXIT_CODE", "99")
    assert requeue_exit_code() == 99
    for bad in ("0", "256", "x"):
        monkeypatch.setenv("BURSTD_REQUEUE_EXIT_CODE", bad)
        with pytest.raises(ValueError, match="BURSTD_REQUEUE_EXIT_CODE"):
            requeue_exit_code()
