"""Run ``burstd`` as a child process: for ``burstctl demo``, the integration tests and the bench.

    d = DaemonProcess("/var/lib/burstd-testbed/burstd/burstd.toml", log_path="/tmp/burstd.log")
    d.start()                     # returns once the control socket answers
    d.kill()                      # SIGKILL, no cleanup (the crash test)
    d.start(crash_at="launch.before_provider:2")   # dies by itself at that point (burstd.faults)
    d.stop()                      # SIGTERM, then SIGKILL after a grace period

``config_with(text, {"daemon": {"cycle_interval_s": 2}, "budget": {"default_account_usd": 100}})`` adds keys
to a TOML config text (into an existing table, or as a new table at the end).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit

import burstd
from burstd.faults import CRASH_ENV, CRASH_EXIT

PKG_ROOT = str(Path(burstd.__file__).resolve().parent.parent)


def config_with(text: str, tables: dict[str, dict[str, Any]]) -> str:
    """``text`` plus ``tables`` (dotted table name -> keys). A key already set in that table is replaced; the
    rest of the text, comments included, is kept (tomlkit edits the document, it does not rewrite it)."""
    doc = tomlkit.parse(text)
    for dotted, keys in tables.items():
        table: Any = doc
        for part in dotted.split("."):
            if isinstance(table, list):  # an array of tables ([[pools]]): the first entry that has the part
                table = next((t for t in table if part in t), None)
                if table is None:
                    raise ValueError(f"config_with: no [[...]] entry has a [{dotted}] table")
            if part not in table:
                table[part] = tomlkit.table()
            table = table[part]
        for key, value in keys.items():
            table[key] = value
    out = tomlkit.dumps(doc)
    tomllib.loads(out)  # fail here, not in the daemon
    return out


class DaemonProcess:
    def __init__(self, config_path: str | os.PathLike, *, log_path: str | os.PathLike,
                 env: dict[str, str] | None = None, python: str = sys.executable):
        self.config_path = str(config_path)
        self.log_path = str(log_path)
        self.env = dict(env or {})
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        with open(self.config_path, "rb") as fh:
            self.socket = tomllib.load(fh).get("api", {}).get("socket", "/run/burstd/burstd.sock")

    def start(self, crash_at: str | None = None, wait: bool = True, timeout: float = 60.0) -> None:
        if (proc := self._live()) is not None:
            raise RuntimeError(f"burstd already runs (pid {proc.pid})")
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONPATH"] = PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop(CRASH_ENV, None)
        if crash_at:
            env[CRASH_ENV] = crash_at
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.python, "-m", "burstd.daemon.main", "--config", self.config_path, "--foreground"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
        )
        log.close()
        self.starts += 1
        if wait:
            try:
                self.wait_ready(timeout)
            except RuntimeError:
                if crash_at and self.proc.returncode == CRASH_EXIT:
                    return  # it reached its crash point while starting up: that is what was asked
                raise

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the daemon's API answers. No request before the socket exists: a daemon takes seconds to import
        and open its database, and the suite starts about 150 of them (docs/testbed.md, round twelve)."""
        self._await_api(lambda api: os.path.exists(self.socket) and bool(api.get("/healthz")), timeout, 0.05,
                        "while starting", f"did not answer on {self.socket}")

    def wait_first_cycle(self, timeout: float = 60.0) -> None:
        """Until the daemon has finished its first cycle. Its API answers before that cycle runs, and the cycle is
        what sets the cloud nodes' gate (``burstd.daemon.cloud_gate``): a cloud job submitted in between starts
        on a cloud node outside burstd's reservation and is refused with a time limit of a year, its end
        (docs/testbed.md, round twelve)."""
        self._await_api(lambda api: api.get("/v1/status").get("last_cycle") is not None, timeout, 0.1,
                        "before its first cycle", "ran no cycle")

    def _await_api(self, done: Callable[[Any], bool], timeout: float, interval: float, dying: str,
                   never: str) -> None:
        """Ask ``done`` (with one API client for every try) until it says yes, the child dies, or time is up."""
        from burstd.daemon.client import ApiClient, ApiError

        deadline = time.monotonic() + timeout
        with ApiClient(self.socket, timeout=2) as api:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"burstd exited with {self.proc.returncode} {dying}; "
                                       f"see {self.log_path}:\n{self.log_tail()}")
                try:
                    if done(api):
                        return
                except ApiError:
                    pass
                time.sleep(interval)
        raise TimeoutError(f"burstd {never} within {timeout:.0f}s; see {self.log_path}")

    def _live(self) -> subprocess.Popen | None:
        """The child while it runs; None before the first start and once it has exited."""
        proc = self.proc
        return proc if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self._live() is not None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def wait_exit(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL: the daemon gets no chance to clean up (what the crash test wants)."""
        if (proc := self._live()) is not None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def stop(self, grace_s: float = 15.0) -> None:
        if (proc := self._live()) is None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        if self.wait_exit(grace_s) is None:
            self.kill()

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return b"".join(fh.readlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
