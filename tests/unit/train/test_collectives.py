"""The collective timeout from the environment, and which errors mean a peer is gone (no torch needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from burstd.train.collectives import (
    CHECKPOINT_TIMEOUT_ENV,
    TIMEOUT_ENV,
    checkpoint_timeout,
    collective_timeout,
    is_peer_loss,
)

# what gloo raised in burstd's own runs (torch 2.13) when a peer's processes were SIGKILLed, or went silent
GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:39079. This is typically caused by a remote worker crashing.")
GLOO_RESET = "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:57551: Connection reset by peer"
GLOO_TIMEOUT = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                "20000ms for recv operation to complete")


def test_timeouts_default_and_come_from_the_environment():
    assert collective_timeout({}) == timedelta(seconds=60)
    assert collective_timeout({TIMEOUT_ENV: "7.5"}) == timedelta(seconds=7.5)
    assert collective_timeout({TIMEOUT_ENV: " "}) == timedelta(seconds=60)
    assert checkpoint_timeout({}) == timedelta(seconds=600)
    assert checkpoint_timeout({CHECKPOINT_TIMEOUT_ENV: "90"}) == timedelta(seconds=90)


@pytest.mark.parametrize("raw", ["0", "-3", "nan", "inf", "ten", "1e400", "1e12", "1e-9"])
def test_a_bad_timeout_is_an_error_naming_the_variable(raw):
    with pytest.raises(ValueError, match=f"{TIMEOUT_ENV} must be .*{raw!r}"):
        collective_timeout({TIMEOUT_ENV: raw})


@pytest.mark.parametrize("message", [GLOO_CLOSED, GLOO_RESET, GLOO_TIMEOUT])
def test_gloo_errors_about_a_gone_peer_are_peer_losses(message):
    assert is_peer_loss(RuntimeError(message))


@pytest.mark.parametrize("exc", [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (32x16 and 8x64)"),
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ValueError("Connection closed by peer"),  # not what a collective raises
    KeyboardInterrupt(),
])
def test_bugs_and_other_errors_are_not_peer_losses(exc):
    assert not is_peer_loss(exc)


def test_torchs_distributed_errors_are_peer_losses():
    torch = pytest.importorskip("torch")
    assert is_peer_loss(torch.distributed.DistBackendError("NCCL watchdog"))
    assert is_peer_loss(torch.distributed.DistNetworkError("store gone"))
