"""The control API's transport: uvicorn on the unix socket (peer credentials in every request's scope), on the
nodes' socket beside it (``config.agent_socket_of``: tokens only), and optionally on a TLS listener; every listener
capped by ``burstd.daemon.conn_guard``. The routes are ``burstd.api.app.create_app``.

The nodes' socket is what the local provider relays into each image VM (``providers/local/vm_agent.py``). The relay
runs as root on the head, so on the main socket every VM's root would have been the daemon's admin; on this one a
connection's peer counts for nothing and the node's agent token is the only credential, as over TLS."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import struct
import threading
import time

import uvicorn
from fastapi import FastAPI

from burstd.api.auth import PEER_KEY, Access, Gate, group_id
from burstd.config import Config, agent_socket_of
from burstd.daemon.conn_guard import (ConnectionBudget, GuardedListener, HeaderTimeoutH11Protocol,
                                      ensure_descriptor_reserve, privileged_peers, unix_peer_process,
                                      with_header_timeout)

# --------------------------------------------------------------------------------------------------
# Transport: put the peer's credentials into every request's scope
# --------------------------------------------------------------------------------------------------
class _PeerApp:
    def __init__(self, app, peer: tuple[int, int, int] | None):
        self.app = app
        self.peer = peer

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope[PEER_KEY] = self.peer
        return await self.app(scope, receive, send)


def peer_credentials(sock: socket.socket | None) -> tuple[int, int, int] | None:
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


class PeerCredH11Protocol(HeaderTimeoutH11Protocol):
    """uvicorn's h11 protocol (silent connections closed), plus SO_PEERCRED of the connection in the ASGI scope."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        try:
            peer = peer_credentials(transport.get_extra_info("socket"))
        except OSError:
            peer = None
        self.app = _PeerApp(self.app, peer)



# --------------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------------
def bind_unix_socket(path: str, group: str) -> socket.socket:
    """Bind ``path``, mode 0660, group ``group``. Only a stale socket is replaced: any other file at the path
    (a typo pointing at a config or a directory) is refused, and so is a socket another daemon answers on."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ValueError(f"api.socket: {path} exists and is not a socket; burstd will not remove it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # stale: nobody listens
        else:
            raise ValueError(f"api.socket: {path} is in use by a running daemon")
        finally:
            probe.close()
    gid = group_id(group)
    if gid is None:
        raise ValueError(f"api.socket_group: no such group {group!r}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chown(path, -1, gid)
    os.chmod(path, 0o660)
    sock.listen(128)
    return sock


class _TokenOnlyApp:
    """TCP and the nodes' socket: the peer counts for nothing, only the bearer token (burstd.api.auth.Access)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope[PEER_KEY] = None
        return await self.app(scope, receive, send)


def read_token_file(path: str) -> str:
    """The admin token: refused if another user made the file or may read it, or if it is empty."""
    from burstd.secure_files import read_secret

    token = read_secret("api.token_file", path).decode(errors="replace").strip()
    if not token:
        raise ValueError(f"api.token_file: {path} is empty")
    return token


class ApiServer:
    """Runs uvicorn in a thread on the unix socket (and optionally TCP)."""

    def __init__(self, app: FastAPI, config: Config):
        self.app = app
        self.config = config
        self._servers: list[uvicorn.Server] = []
        self._threads: list[threading.Thread] = []
        self.budgets: list[ConnectionBudget] = []  # one a listener: open connections, refusals

    def start(self) -> None:
        api = self.config.api
        access: Access = self.app.state.access
        gated = Gate(self.app, access, api.max_body_bytes)
        if api.tcp_listen:  # every check before anything is bound
            if not api.token_file:  # ApiConfig refuses tcp_listen without one; never a listener without a token
                raise ValueError("api.tcp_listen needs api.token_file")
            access.set_token(read_token_file(api.token_file))
        listeners = 3 if api.tcp_listen else 2
        ensure_descriptor_reserve(api.max_connections * listeners)
        self.budgets = [ConnectionBudget("unix", api.max_connections, api.max_connections_per_peer,
                                         privileged_peers())]
        sock = GuardedListener.wrap(bind_unix_socket(api.socket, api.socket_group), self.budgets[0],
                                   api.header_timeout_s)
        cfg = uvicorn.Config(gated, http=with_header_timeout(PeerCredH11Protocol, api.header_timeout_s),
                             lifespan="off", log_config=None, access_log=False, timeout_keep_alive=5, ws="none")
        self._spawn(uvicorn.Server(cfg), [sock])
        # the nodes' socket: its own connection budget, so a flood from VMs never starves the hooks' socket
        self.budgets.append(ConnectionBudget("agents", api.max_connections, api.max_connections_per_peer))
        agents = GuardedListener.wrap(bind_unix_socket(agent_socket_of(api.socket), api.socket_group),
                                      self.budgets[-1], api.header_timeout_s, peer_of=unix_peer_process)
        acfg = uvicorn.Config(_TokenOnlyApp(gated), http=with_header_timeout(HeaderTimeoutH11Protocol,
                                                                               api.header_timeout_s),
                              lifespan="off", log_config=None, access_log=False, timeout_keep_alive=5, ws="none")
        self._spawn(uvicorn.Server(acfg), [agents])
        if api.tcp_listen:
            host, _, port = api.tcp_listen.rpartition(":")
            tcp = socket.create_server((host.strip("[]") or "127.0.0.1", int(port)),
                                       family=socket.AF_INET6 if host.startswith("[") else socket.AF_INET)
            # no privileged peers on TCP: any address may be a cloud node's
            self.budgets.append(ConnectionBudget("tcp", api.max_connections, api.max_connections_per_peer))
            tcfg = uvicorn.Config(_TokenOnlyApp(gated), lifespan="off", log_config=None, access_log=False, ws="none",
                                  http=with_header_timeout(HeaderTimeoutH11Protocol, api.header_timeout_s),
                                  ssl_certfile=api.tls_cert, ssl_keyfile=api.tls_key, timeout_keep_alive=5)
            tcfg.load()  # builds the TLS context now: a bad cert or key fails the start, not the first call
            self._spawn(uvicorn.Server(tcfg), [GuardedListener.wrap(tcp, self.budgets[-1], api.header_timeout_s)])

    def _spawn(self, server: uvicorn.Server, sockets: list[socket.socket]) -> None:
        setattr(server, "install_signal_handlers", lambda: None)  # noqa: B010 - the API thread leaves signals be
        t = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=sockets)), name="burstd-api",
                             daemon=True)
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    def wait_started(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(s.started for s in self._servers):
                return True
            time.sleep(0.01)
        return False

    def stop(self) -> None:
        for s in self._servers:
            s.should_exit = True
        for t in self._threads:
            t.join(timeout=5)
        for path in (self.config.api.socket, agent_socket_of(self.config.api.socket)):
            try:
                os.unlink(path)
            except OSError:
                pass
