"""The metered link between on-prem and a pool's cloud side: a token bucket, and a TCP relay that spends it.

The kernel on the bed has no traffic shaping (no tc/netem), so the link is metered in the transfer path: every
byte between the head and the object store near the pool passes a ``MeteredLink`` relay whose two directions
each hold a ``TokenBucket`` of ``rate_bytes_s``. Staging time on the bed is then what the link's bandwidth
makes it. ``cut()`` drops every open connection and refuses new ones (a dead link); ``restore()`` heals it.

    link = MeteredLink(("127.0.0.1", s3_port), rate_bytes_s=20e6); link.start()
    boto3.client("s3", endpoint_url=link.url)                     # every byte now costs link time

    python -m burstd.data.link --target 127.0.0.1:5000 --rate-bytes-s 20e6 [--listen 0.0.0.0:9000]
        # a relay process (the bed's link): prints {"url": ...}; SIGUSR1 cuts the link, SIGUSR2 restores it
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Self

RELAY_BLOCK = 64 << 10


class TokenBucket:
    """``take(n)`` blocks until n bytes fit the rate; a burst of at most ``burst_bytes`` passes at once.

    Thread-safe: all connections of one direction share one bucket, so together they get the link's rate.
    Clock and sleep are injectable so the arithmetic is tested without waiting.
    """

    def __init__(self, rate_bytes_s: float, burst_bytes: int | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        if rate_bytes_s <= 0:
            raise ValueError(f"rate_bytes_s must be positive, not {rate_bytes_s}")
        self.rate = float(rate_bytes_s)
        # a tenth of a second of traffic by default: smooth, yet large enough that one relay block never starves
        self.burst = max(int(burst_bytes if burst_bytes is not None else rate_bytes_s / 10), RELAY_BLOCK)
        self._clock, self._sleep = clock, sleep
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self, n: int) -> None:
        """Spend n tokens, waiting as long as the rate requires (n may exceed the burst: it is paid in slices)."""
        while n > 0:
            piece = min(n, self.burst)
            with self._lock:
                self._refill()
                self._tokens -= piece  # may go negative: the debt is the wait, and later takers queue behind it
                wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            if wait > 0:
                self._sleep(wait)
            n -= piece


class MeteredLink:
    """A TCP relay on 127.0.0.1 (or ``listen_host``) to ``target``, metered both ways at ``rate_bytes_s``."""

    def __init__(self, target: tuple[str, int], rate_bytes_s: float, listen_host: str = "127.0.0.1",
                 listen_port: int = 0, far_buffer_bytes: int = 4 << 20):
        self.target = target
        self.far_buffer_bytes = far_buffer_bytes
        self.up = TokenBucket(rate_bytes_s)  # on-prem -> cloud side
        self.down = TokenBucket(rate_bytes_s)  # cloud side -> on-prem
        self._server = socket.create_server((listen_host, listen_port), reuse_port=False)
        self.host, self.port = self._server.getsockname()[:2]
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        self.bytes_up = 0
        self.bytes_down = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        threading.Thread(target=self._accept, name="metered-link", daemon=True).start()
        return self

    def cut(self) -> None:
        """The link dies: open connections are reset, new ones are closed at once."""
        with self._lock:
            self._cut = True
            conns, self._conns = list(self._conns), set()
        for c in conns:
            _close(c)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._server)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, self.up, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self.down, "down"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, bucket: TokenBucket, way: str) -> None:
        """Bytes cross the link (at the bucket's rate) as they are read from the sender, into a buffer of
        ``far_buffer_bytes`` at the far end that a second thread drains into the receiver: a receiver that
        pauses for a moment (a busy store) does not stall the link, as a real link's bytes in flight and
        socket buffers do not."""
        buffered: queue.Queue[bytes | None] = queue.Queue(maxsize=max(1, self.far_buffer_bytes // RELAY_BLOCK))
        writer = threading.Thread(target=self._drain, args=(buffered, src, dst), daemon=True)
        writer.start()
        try:
            while data := src.recv(RELAY_BLOCK):
                bucket.take(len(data))
                buffered.put(data)
                if way == "up":
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)
        except OSError:
            pass
        finally:
            buffered.put(None)
            writer.join()
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)

    def _drain(self, buffered: queue.Queue[bytes | None], src: socket.socket, dst: socket.socket) -> None:
        failed = False
        while (data := buffered.get()) is not None:
            if failed:
                continue  # keep taking so the reader never blocks on a full buffer
            try:
                dst.sendall(data)
            except OSError:
                failed = True
                _close(src)  # the receiver is gone: stop the sender too


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def _host_port(text: str, flag: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise SystemExit(f"{flag} {text!r}: give HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burstd.data.link", description="A metered TCP relay.")
    ap.add_argument("--target", required=True, help="HOST:PORT of the object store")
    ap.add_argument("--rate-bytes-s", required=True, type=float, help="bandwidth each way, bytes a second")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (default: a free local port)")
    args = ap.parse_args(argv)
    if args.rate_bytes_s <= 0:
        raise SystemExit(f"--rate-bytes-s {args.rate_bytes_s}: must be positive")
    host, port = _host_port(args.listen, "--listen")
    link = MeteredLink(_host_port(args.target, "--target"), args.rate_bytes_s, host, port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: link.cut())
    signal.signal(signal.SIGUSR2, lambda *_: link.restore())
    print(json.dumps({"url": link.url, "pid": os.getpid()}), flush=True)
    stop.wait()
    link.close()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
