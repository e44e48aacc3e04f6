"""Connection limits for every listener the daemon opens: no client can starve it (issue 21, item 3).

A job on a cloud node once held about 1,000 idle TLS connections open to the daemon: its 1,024 descriptors ran out,
hooks and snapshots failed with EMFILE and asyncio logged a traceback per refused accept. Three rules hold now:

* **Caps at accept time.** :class:`ConnectionBudget` counts open connections in total and per peer (a uid on the
  unix socket, an address on TCP). A connection over a cap is closed the moment it is accepted, before TLS or
  HTTP cost anything; root and the daemon's own user are exempt from the per-peer cap and have a reserve of
  their own above the total, so an admin (and the Slurm hooks, when they run as root) still get in during a flood.
* **Silent connections are dropped.** A connection that has not sent a whole request head within
  ``header_timeout_s`` is closed (uvicorn only times out *between* requests); between requests uvicorn's
  keep-alive timeout applies; the metrics server times out idle reads.
* **A descriptor reserve.** :func:`ensure_descriptor_reserve` raises the soft ``RLIMIT_NOFILE`` to what the caps
  need plus a reserve for hooks, Slurm calls and the database, and refuses to start when the hard limit is lower
  (``LimitNOFILE`` in ``systemd/burstd.service``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import struct
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler
from uvicorn.protocols.http.h11_impl import H11Protocol
from wsgiref.simple_server import make_server

from burstd.daemon.logging import ev, get_logger

log = get_logger("api")

#: Descriptors kept free of every listener: hook requests, squeue/scontrol pipes, the database, log files.
DESCRIPTOR_RESERVE = 512
#: Connections above the total that root and the daemon's own user may still open during a flood.
PRIVILEGED_RESERVE = 16


class ConnectionBudget:
    """Open connections, in total and per peer, for one listener. Thread-safe (the metrics server is threaded)."""

    def __init__(self, name: str, total: int, per_peer: int, privileged: frozenset[Hashable] = frozenset()):
        self.name = name
        self.total = total
        self.per_peer = per_peer
        self.privileged = privileged
        self.refused = 0
        self._open: Counter[Hashable] = Counter()
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return sum(self._open.values())

    def admit(self, peer: Hashable) -> bool:
        """Count one more connection of ``peer``; False (and nothing counted) when a cap forbids it."""
        with self._lock:
            total = sum(self._open.values())
            if peer in self.privileged:
                ok = total < self.total + PRIVILEGED_RESERVE
            else:
                ok = total < self.total and self._open[peer] < self.per_peer
            if ok:
                self._open[peer] += 1
            else:
                self.refused += 1
            refused = self.refused
        if not ok and _is_power_of_two(refused):  # a flood logs 1, 2, 4, 8, ... lines, not one per connection
            log.warning("connection refused: over the cap", extra=ev(listener=self.name, peer=str(peer),
                                                                     refused_total=refused, cap=self.total,
                                                                     cap_per_peer=self.per_peer))
        return ok

    def release(self, peer: Hashable) -> None:
        with self._lock:
            if self._open[peer] <= 1:
                self._open.pop(peer, None)
            else:
                self._open[peer] -= 1


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def unix_peer(conn: socket.socket) -> Hashable:
    """The uid at the other end of a unix-socket connection (``SO_PEERCRED``)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


def unix_peer_process(conn: socket.socket) -> Hashable:
    """The process at the other end (``SO_PEERCRED``'s pid): on the nodes' socket every VM's relay is root, and
    one VM must not use up the others' share."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return ("pid", struct.unpack("3i", raw)[0])


def inet_peer(addr: Any) -> Hashable:
    """The peer's address, without its port: one host is one peer."""
    return addr[0] if isinstance(addr, tuple) else str(addr)


#: Accepted connections that have not reached HTTP yet (a TLS handshake under way), by descriptor.
_UNSTARTED: dict[int, socket.socket] = {}


class _CountedSocket(socket.socket):
    """An accepted connection that gives its slot back when closed (or collected without a close)."""

    _burstd_release: Any = None

    def close(self) -> None:
        release, self._burstd_release = self._burstd_release, None
        if release is not None:
            release()
        with contextlib.suppress(OSError):
            if _UNSTARTED.get(self.fileno()) is self:
                del _UNSTARTED[self.fileno()]
        super().close()


def _drop_if_unstarted(fd: int, conn_ref: weakref.ref[socket.socket]) -> None:
    """A connection still short of HTTP at its deadline (a TLS handshake never finished) is shut down; its
    transport sees the end of the stream and closes it. asyncio's own handshake timeout is 60 s."""
    conn = conn_ref()
    if conn is not None and _UNSTARTED.get(fd) is conn:
        del _UNSTARTED[fd]
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)


def _mark_started(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        _UNSTARTED.pop(sock.fileno(), None)


class GuardedListener(socket.socket):
    """A listening socket whose ``accept`` enforces a :class:`ConnectionBudget`.

    asyncio's ``create_server(sock=...)`` calls ``sock.accept()`` for each incoming connection; a connection over
    the cap is closed here, so it never reaches TLS, uvicorn or a log line of its own."""

    budget: ConnectionBudget
    start_timeout_s: float
    peer_of: Callable[[socket.socket], Hashable]

    if TYPE_CHECKING:  # _socket.socket's own accept (what socket.accept() wraps), private so typeshed omits it
        def _accept(self) -> tuple[int, Any]: ...

    @classmethod
    def wrap(cls, sock: socket.socket, budget: ConnectionBudget, start_timeout_s: float,
             peer_of: Callable[[socket.socket], Hashable] = unix_peer) -> GuardedListener:
        """``peer_of``: who a unix connection counts against (its uid unless told otherwise)."""
        guarded = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        guarded.budget = budget
        guarded.start_timeout_s = start_timeout_s
        guarded.peer_of = peer_of
        return guarded

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            fd, addr = self._accept()  # BlockingIOError when none is left
            conn = _CountedSocket(self.family, self.type, self.proto, fileno=fd)
            try:
                peer = self.peer_of(conn) if self.family == socket.AF_UNIX else inet_peer(addr)
            except OSError:
                conn.close()
                continue
            if not self.budget.admit(peer):
                conn.close()
                continue
            done = threading.Event()  # close() and the finalizer must not both release the slot

            def release(peer: Hashable = peer, done: threading.Event = done) -> None:
                if not done.is_set():
                    done.set()
                    self.budget.release(peer)

            conn._burstd_release = release
            weakref.finalize(conn, release)
            with contextlib.suppress(RuntimeError):  # asyncio accepts on its loop; a plain caller has none
                loop = asyncio.get_running_loop()
                _UNSTARTED[fd] = conn
                conn_ref: weakref.ref[socket.socket] = weakref.ref(conn)
                loop.call_later(self.start_timeout_s, _drop_if_unstarted, fd, conn_ref)
            if socket.getdefaulttimeout() is None and self.gettimeout():
                conn.setblocking(True)  # as socket.accept() does; asyncio makes it non-blocking itself
            return conn, addr


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that sends no whole request head within ``header_timeout_s``.

    uvicorn's own ``timeout_keep_alive`` starts only after a response, so a client that connects and says nothing
    (or trickles a header) would otherwise hold its connection for ever."""

    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        _mark_started(transport)
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._drop_if_silent)

    def _drop_if_silent(self) -> None:
        self._header_timer = None
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)


def with_header_timeout(protocol: type[HeaderTimeoutH11Protocol], seconds: float) -> type[HeaderTimeoutH11Protocol]:
    """``protocol`` with its own header timeout (uvicorn builds protocols from a class, not an instance)."""
    return type(protocol.__name__, (protocol,), {"header_timeout_s": seconds})


def privileged_peers() -> frozenset[Hashable]:
    """Peers exempt from the per-peer cap: root and the daemon's own user (unix socket uids)."""
    return frozenset({0, os.geteuid()})


def ensure_descriptor_reserve(connection_caps: int) -> int:
    """Raise the soft descriptor limit so every listener's cap still leaves :data:`DESCRIPTOR_RESERVE` free.

    Returns the soft limit now in force. Raises ``RuntimeError`` naming the numbers when the hard limit is too low
    (systemd's ``LimitNOFILE``, or ``ulimit -Hn``): better to refuse to start than to starve later."""
    need = connection_caps + PRIVILEGED_RESERVE * 3 + DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise RuntimeError(f"the descriptor limit is {hard} (hard), but the API's connection caps ({connection_caps}) "
                           f"plus the reserve for hooks and Slurm calls ({DESCRIPTOR_RESERVE}) need {need}: raise "
                           "LimitNOFILE in the unit (systemd/burstd.service sets 65536) or lower "
                           "api.max_connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return need


#: The metrics port's caps: a Prometheus server scrapes over one connection; a handful of readers at most.
METRICS_MAX_CONNECTIONS = 64
METRICS_MAX_PER_PEER = 8


class _TimedHandler(_SilentHandler):
    timeout = 10  # seconds an idle or slow read may take before the handler's thread gives up


class GuardedMetricsServer(ThreadingWSGIServer):
    """prometheus_client's threaded WSGI server with a :class:`ConnectionBudget` (a thread and a descriptor a
    connection: uncapped, a flood of idle connections would take both without end)."""

    budget: ConnectionBudget
    _admitted: dict[int, Hashable]
    request_queue_size = 128  # socketserver's 5 would leave a flood in the kernel's queue, uncounted

    def verify_request(self, request, client_address) -> bool:
        peer = inet_peer(client_address)
        if not self.budget.admit(peer):
            return False
        self._admitted[id(request)] = peer
        return True

    def handle_error(self, request, client_address) -> None:
        # socketserver prints a traceback per failed request to stderr; an idle reader timing out is routine
        exc = sys.exc_info()[1]
        if not isinstance(exc, (TimeoutError, ConnectionError)):
            log.warning("metrics request failed", exc_info=True, extra=ev(peer=str(client_address)))

    def shutdown_request(self, request) -> None:
        peer = self._admitted.pop(id(request), None)
        if peer is not None:
            self.budget.release(peer)
        super().shutdown_request(request)


def serve_metrics(registry: CollectorRegistry, port: int, address: str) -> GuardedMetricsServer:
    """The metrics endpoint on ``address:port``, capped, in a daemon thread."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server_class = type("MetricsServer", (GuardedMetricsServer,), {"address_family": family})
    httpd: GuardedMetricsServer = make_server(address, port, make_wsgi_app(registry), server_class, handler_class=_TimedHandler)
    httpd.budget = ConnectionBudget("metrics", METRICS_MAX_CONNECTIONS, METRICS_MAX_PER_PEER)
    httpd._admitted = {}
    threading.Thread(target=httpd.serve_forever, name="burstd-metrics", daemon=True).start()
    return httpd
