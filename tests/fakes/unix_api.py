"""A stand-in for burstd's control API on a unix socket: GETs answered with JSON by a function of the path.

    api = UnixJsonApi(tmp_path / "burstd.sock", lambda path: (200, {"ok": True}))
    ...                       # api.paths: every path asked, in order
    api.close()
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

Answer = Callable[[str], tuple[int, Any]]  # path (with its query) -> (status, JSON body)


class UnixJsonApi(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str | Path, answer: Answer):
        self.answer = answer  # replaceable while serving
        self.paths: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def address_string(self):  # a unix peer has no address
                return "unix"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                api.paths.append(self.path)
                status, body = api.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(str(path), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
