"""The host's munged is started once, even when beds come up in parallel (the CI run that lost 87 bed tests).

The edges faked here are munged itself (answering or not) and the start command; the lock and the decision are
the real code."""
from __future__ import annotations

import subprocess
import threading

import pytest

from burstd.testbed import host


@pytest.fixture
def fake_munged(monkeypatch, tmp_path):
    """A munged that answers once started, refuses a second copy, and takes a moment to bind its socket."""
    state = {"running": False, "starts": 0, "refused": 0}
    lock = threading.Lock()

    def munge_ok() -> bool:
        return state["running"]

    def start(argv, what, env=None, timeout=60, check=True):
        assert argv[-1] == "/usr/sbin/munged"
        with lock:
            if state["running"]:
                state["refused"] += 1
                return subprocess.CompletedProcess(argv, 1, "", 'munged: Error: Failed to lock "/run/munge/..."')
            state["starts"] += 1
            state["running"] = True
            return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(host, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(host, "munge_ok", munge_ok)
    monkeypatch.setattr(host, "_sh", start)
    monkeypatch.setattr(host.Path, "exists", lambda self: True)
    real_mkdir = host.Path.mkdir
    monkeypatch.setattr(host.Path, "mkdir", lambda self, *a, **k:
                        None if str(self) == "/run/munge" else real_mkdir(self, *a, **k))
    monkeypatch.setattr(host.shutil, "chown", lambda *a, **k: None)
    return state


def test_parallel_beds_start_munged_once_and_none_fails(fake_munged):
    errors: list[BaseException] = []

    def bring_up() -> None:
        try:
            host.ensure_munge()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=bring_up) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fake_munged["starts"] == 1
    assert fake_munged["refused"] == 0


def test_a_munged_started_elsewhere_after_our_check_counts_as_started(fake_munged, monkeypatch):
    """Another process (not one of ours: no shared lock) wins the race: munged refuses us, but it answers."""
    real_start = host._sh

    def start_after_a_rival(argv, what, env=None, timeout=60, check=True):
        real_start(argv, what)          # the rival's start
        return real_start(argv, what)   # ours, refused
    monkeypatch.setattr(host, "_sh", start_after_a_rival)
    host.ensure_munge()
    assert fake_munged["refused"] == 1


def test_a_munged_that_never_answers_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(host, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(host, "munge_ok", lambda: False)
    monkeypatch.setattr(host, "_sh", lambda argv, what, env=None, timeout=60, check=True:
                        subprocess.CompletedProcess(argv, 1, "", "munged: Error: bad key"))
    monkeypatch.setattr(host.Path, "exists", lambda self: True)
    monkeypatch.setattr(host.shutil, "chown", lambda *a, **k: None)
    real_mkdir = host.Path.mkdir
    monkeypatch.setattr(host.Path, "mkdir", lambda self, *a, **k:
                        None if str(self) == "/run/munge" else real_mkdir(self, *a, **k))
    monkeypatch.setattr(host, "_wait", lambda pred, timeout, what: (_ for _ in ()).throw(host.BedError(what)))
    with pytest.raises(host.BedError, match="exited 1 and munge does not answer: munged: Error: bad key"):
        host.ensure_munge()
