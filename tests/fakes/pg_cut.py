"""A cuttable path to PostgreSQL: one daemon's database connection can be severed while the others keep theirs.

    cut = PgCut(pg)                  # pg: burstd.testbed.pg.ThrowawayPostgres (listens on a unix socket only)
    url = cut.url("t_abc")           # give this URL to the daemon whose connection the test will cut
    url = cut.through(postgres_url)  # the same, from the URL of a database on ``pg``
    cut.sever()                      # every open connection closed at once, every new one closed on accept
    cut.heal()                       # connections pass again
    cut.close()

The proxy listens on its own unix socket, named the way libpq names a server's (``.s.PGSQL.<port>`` in its own
folder), and copies bytes both ways to the server's socket, a thread per direction. Cut, a client sees what it
sees when the network between it and the database fails: "server closed the connection unexpectedly".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path


class PgCut:
    def __init__(self, pg):
        self.pg = pg
        self.dir = Path(tempfile.mkdtemp(prefix="burstd-pgcut-", dir="/tmp"))
        os.chmod(self.dir, 0o755)
        self.target = str(Path(pg.socket_dir) / f".s.PGSQL.{pg.port}")
        self.path = str(self.dir / f".s.PGSQL.{pg.port}")
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._cut = False
        self.cuts: list[tuple[float, float | None]] = []  # (severed at, healed at) in time.monotonic()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o777)
        self._listener.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="pgcut-accept", daemon=True).start()

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{self.pg.db_user}@/{database}?host={self.dir}&port={self.pg.port}"

    def through(self, url: str) -> str:
        """``url`` (a database on ``pg``, as ``postgres_url`` gives it) by way of this proxy."""
        direct = f"host={self.pg.socket_dir}&"
        if direct not in url:
            raise ValueError(f"{url!r} is not a database on this server ({direct!r} missing)")
        return url.replace(direct, f"host={self.dir}&")

    @property
    def is_cut(self) -> bool:
        return self._cut

    def sever(self) -> None:
        with self._lock:
            self._cut = True
            conns, self._conns = list(self._conns), set()
        self.cuts.append((time.monotonic(), None))
        for c in conns:
            _close(c)

    def heal(self) -> None:
        with self._lock:
            self._cut = False
        if self.cuts and self.cuts[-1][1] is None:
            self.cuts[-1] = (self.cuts[-1][0], time.monotonic())

    def close(self) -> None:
        self._closed = True
        self.sever()
        _close(self._listener)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:  # refused: the client's connect succeeds, its first read sees the close
                _close(client)
                continue
            try:
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.connect(self.target)
            except OSError:  # the server itself is down: pass that on
                _close(client)
                continue
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(server)
                    continue
                self._conns.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), name="pgcut-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
