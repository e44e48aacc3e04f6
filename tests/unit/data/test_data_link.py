"""The metered link: token-bucket arithmetic on a fake clock, and a real TCP relay held to its rate."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from burstd.data.link import MeteredLink, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_the_bucket_lets_a_burst_through_then_holds_to_the_rate():
    clock = FakeClock()
    b = TokenBucket(1_000_000, burst_bytes=100_000, clock=clock, sleep=clock.sleep)
    b.take(100_000)
    assert clock.now == 0  # the burst is free
    b.take(1_000_000)
    assert clock.now == pytest.approx(1.0)
    clock.now += 5  # idle: at most one burst saved up
    start = clock.now
    b.take(300_000)
    assert clock.now - start == pytest.approx(0.2)


def test_a_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate_bytes_s"):
        TokenBucket(0)


def echo_sink() -> tuple[socket.socket, list[int]]:
    srv = socket.create_server(("127.0.0.1", 0))
    got = [0]

    def serve() -> None:
        try:
            conn, _ = srv.accept()
        except OSError:  # the test closed the server first
            return
        try:
            while data := conn.recv(1 << 16):
                got[0] += len(data)
        except OSError:  # the link was cut: a reset is what it should see
            pass
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, got


def test_bytes_through_the_relay_take_the_time_the_rate_says():
    srv, got = echo_sink()
    with MeteredLink(srv.getsockname()[:2], rate_bytes_s=4_000_000) as link:
        s = socket.create_connection((link.host, link.port))
        t0 = time.monotonic()
        s.sendall(b"x" * 2_000_000)
        s.shutdown(socket.SHUT_WR)
        while got[0] < 2_000_000 and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        took = time.monotonic() - t0
    assert got[0] == 2_000_000 and link.bytes_up == 2_000_000
    assert 0.35 <= took <= 2.0  # 2 MB at 4 MB/s, less the first burst; generous above for a loaded machine
    srv.close()


def test_a_cut_link_resets_open_connections_and_refuses_new_ones_until_restored():
    srv, _ = echo_sink()
    with MeteredLink(srv.getsockname()[:2], rate_bytes_s=1_000) as link:
        s = socket.create_connection((link.host, link.port))
        link.cut()
        s.settimeout(5)
        with pytest.raises(OSError):
            for _ in range(50):  # the reset shows on a send or as EOF on recv
                s.sendall(b"x" * 1000)
                if s.recv(1) == b"":
                    raise ConnectionResetError
        s2 = socket.create_connection((link.host, link.port))
        s2.settimeout(5)
        assert s2.recv(1) == b""  # closed at once
        link.restore()
    srv.close()
