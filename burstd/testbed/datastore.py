"""The bed's cloud side for data (issue 24): an S3-compatible server (moto) and the metered link in front of it.

    store = BedDataStore.for_slot(state_dir, slot=3, link_host="10.80.0.1", rate_bytes_s=20e6).up()
    store.url          # give this to burstd-agent stage-in/stage-out (--endpoint-url) and the head's push
    store.cut(); store.restore()                      # the link dies / heals (SIGUSR1 / SIGUSR2 to its process)
    store.down()

Both run as their own processes (pid files in ``state_dir``), so they outlive the test or command that started
them, like the rest of a bed. Ports follow the bed's slot: store 6822 + 100*slot on 127.0.0.1 (reachable only
through the link), link 6823 + 100*slot on ``link_host`` (the bridge address, so the namespace VMs reach it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from burstd.testbed.host import BedError

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class BedDataStore:
    state_dir: Path
    store_port: int
    link_host: str
    link_port: int
    rate_bytes_s: float

    @classmethod
    def for_slot(cls, state_dir: Path, slot: int, link_host: str = "127.0.0.1",
                 rate_bytes_s: float = 20e6) -> BedDataStore:
        return cls(Path(state_dir), 6822 + 100 * slot, link_host, 6823 + 100 * slot, rate_bytes_s)

    @property
    def url(self) -> str:
        return f"http://{self.link_host}:{self.link_port}"

    @property
    def store_url(self) -> str:
        """The store itself, bypassing the link (for checks, never for staging)."""
        return f"http://127.0.0.1:{self.store_port}"

    def _pid_file(self, what: str) -> Path:
        return self.state_dir / f"data-{what}.pid"

    def _alive(self, what: str) -> int | None:
        try:
            pid = int(self._pid_file(what).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def up(self, timeout_s: float = 60) -> BedDataStore:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
                   MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=str(1 << 30))
        if self._alive("store") is None:
            self._spawn("store", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.store_port)],
                        env)
        _wait_port("127.0.0.1", self.store_port, timeout_s, "the bed's S3 server (moto)")
        if self._alive("link") is None:
            self._spawn("link", [sys.executable, "-m", "burstd.data.link", "--target", f"127.0.0.1:{self.store_port}",
                                 "--rate-bytes-s", repr(self.rate_bytes_s),
                                 "--listen", f"{self.link_host}:{self.link_port}"], env)
        _wait_port(self.link_host, self.link_port, timeout_s, "the bed's metered link")
        (self.state_dir / "data-store.json").write_text(json.dumps(
            {"url": self.url, "store_url": self.store_url, "rate_bytes_s": self.rate_bytes_s}))
        return self

    def _spawn(self, what: str, argv: list[str], env: dict[str, str]) -> None:
        with open(self.state_dir / f"data-{what}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, cwd=self.state_dir)
        self._pid_file(what).write_text(str(proc.pid))

    def cut(self) -> None:
        self._signal_link(signal.SIGUSR1)

    def restore(self) -> None:
        self._signal_link(signal.SIGUSR2)

    def _signal_link(self, sig: signal.Signals) -> None:
        pid = self._alive("link")
        if pid is None:
            raise BedError(f"the bed's metered link is not running (no live pid in {self._pid_file('link')})")
        os.kill(pid, sig)
        time.sleep(0.1)  # the handler runs between the relay's socket calls

    def down(self, timeout_s: float = 10) -> None:
        for what in ("link", "store"):
            pid = self._alive(what)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + timeout_s
                while self._alive(what) is not None and time.monotonic() < deadline:
                    _reap(pid)
                    time.sleep(0.05)
                if self._alive(what) is not None:
                    os.kill(pid, signal.SIGKILL)
                    _reap(pid)
            self._pid_file(what).unlink(missing_ok=True)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_port(host: str, port: int, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise BedError(f"{what} did not answer on {host}:{port} within {timeout_s:.0f}s (its log: data-*.log)")
