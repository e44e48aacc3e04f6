"""Issue 21 item 9: the edges of the Slurm hook's contract (exit 0 accepted, 2 bad input, 3 daemon down or
busy; always one ``burstd-hook:`` line on stderr).

A resume file nested thousands deep, with Infinity or NaN, or 300 MB big exits 2 with one line (it gave
tracebacks and exit 1, and read the whole file); ids are integers, never coerced (``1.9`` and ``true`` were read
as 1); a 413 is "request too large" (it was "is the daemon running?"); and a hook that gave up never gets its
lease recorded later by a slow request: it sends its deadline, which the daemon checks before it acts.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.client import ApiError, post_unix_json
from burstd.daemon.hooks import MAX_RESUME_FILE_BYTES, run
from burstd.daemon.reconcile import Reconciler
from burstd.db.store import Store
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider
from tests.unit.daemon.first_rule import first_rule

HOOK_TIMEOUT = 1.0
JOB = {"job_id": 7, "nodes_alloc": "cloud1"}


def _daemon(tmp_path, max_body: int = 4 << 20):
    cfg = parse_config({
        "api": {"socket": str(tmp_path / "b.sock"), "max_body_bytes": max_body},
        "daemon": {"state_dir": str(tmp_path), "hook_timeout_s": HOOK_TIMEOUT},
        "database": {"url": f"sqlite:///{tmp_path / 'burstd.db'}"},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
    })
    store = Store.open(cfg.database.url)
    clock = FakeClock()
    rec = Reconciler(cfg, store, FakeAdapter(), {"local": FakeProvider("local", clock)}, first_rule, clock=clock)
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    (tmp_path / "burstd.toml").write_text(f'[api]\nsocket = "{cfg.api.socket}"\n'
                                          f'[daemon]\nhook_timeout_s = {HOOK_TIMEOUT}\n')
    return cfg, store, rec, server


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    cfg, store, rec, server = _daemon(tmp_path)
    monkeypatch.setenv("BURSTD_CONFIG", str(tmp_path / "burstd.toml"))
    monkeypatch.delenv("BURSTD_SOCKET", raising=False)
    yield cfg, store, rec
    server.stop()
    store.close()


def _resume_file(tmp_path, monkeypatch, raw: bytes) -> None:
    path = tmp_path / "resume.json"
    path.write_bytes(raw)
    monkeypatch.setenv("SLURM_RESUME_FILE", str(path))


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("burstd-hook: "), err
    return lines[0]


HOSTILE = {
    "nested 100000 deep": b'{"jobs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nested deep inside a job": b'{"jobs": [{"job_id": 7, "x": ' + b"{\"a\":" * 50_000 + b"1" + b"}" * 50_000 + b"}]}",
    "Infinity id": b'{"jobs": [{"job_id": Infinity, "nodes_alloc": "cloud1"}]}',
    "NaN priority": b'{"jobs": [{"job_id": 7, "nodes_alloc": "cloud1", "priority": NaN}]}',
    "1e999 id": b'{"jobs": [{"job_id": 1e999, "nodes_alloc": "cloud1"}]}',
    "float id 1.9": b'{"jobs": [{"job_id": 1.9, "nodes_alloc": "cloud1"}]}',
    "float id 7.0": b'{"jobs": [{"job_id": 7.0, "nodes_alloc": "cloud1"}]}',
    "boolean id": b'{"jobs": [{"job_id": true, "nodes_alloc": "cloud1"}]}',
    "string id": b'{"jobs": [{"job_id": "7", "nodes_alloc": "cloud1"}]}',
    "id 0": b'{"jobs": [{"job_id": 0, "nodes_alloc": "cloud1"}]}',
    "id 2^32": b'{"jobs": [{"job_id": 4294967296, "nodes_alloc": "cloud1"}]}',
    "4400-digit id": b'{"jobs": [{"job_id": ' + b"9" * 4400 + b', "nodes_alloc": "cloud1"}]}',
    "boolean priority": b'{"jobs": [{"job_id": 7, "nodes_alloc": "cloud1", "priority": false}]}',
    "nodes a number": b'{"jobs": [{"job_id": 7, "nodes_alloc": 5}]}',
    "jobs an object": b'{"jobs": {"job_id": 7}}',
    "a job a list": b'{"jobs": [[7, "cloud1"]]}',
    "not an object": b"[1, 2]",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_resume_file_exits_2_with_one_line(tmp_path, monkeypatch, capsys, name):
    _resume_file(tmp_path, monkeypatch, HOSTILE[name])
    assert run(["resume", "cloud1"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "SLURM_RESUME_FILE" in line and "Traceback" not in line


def test_a_300_mb_resume_file_is_refused_by_its_size_never_read_whole(tmp_path, monkeypatch, capsys):
    path = tmp_path / "resume.json"
    with open(path, "wb") as fh:
        fh.write(b'{"jobs": [')
        fh.truncate(300 << 20)  # sparse: 300 MB on paper, nothing on disk
    monkeypatch.setenv("SLURM_RESUME_FILE", str(path))
    assert run(["resume", "cloud1"]) == 2
    assert f"larger than {MAX_RESUME_FILE_BYTES} bytes" in _one_line(capsys.readouterr().err)


def test_a_plain_resume_file_still_reaches_the_daemon(daemon, tmp_path, monkeypatch, capsys):
    _, store, _ = daemon
    job = {**JOB, "priority": 10, "exclusive": "NODE"}
    _resume_file(tmp_path, monkeypatch, json.dumps({"jobs": [job]}).encode())
    assert run(["resume", "cloud1"]) == 0, capsys.readouterr().err
    lease = store.lease_for_node("cloud1")
    assert lease is not None and lease.job_ids == (7,)


@pytest.mark.parametrize("job_id", [1.9, True, "7", 7.0])
def test_the_daemon_reads_ids_as_integers_only(daemon, job_id):
    cfg, store, _ = daemon
    with pytest.raises(ApiError) as err:
        post_unix_json(cfg.api.socket, "/v1/hooks/resume",
                       {"hostlist": "cloud1", "jobs": [{"job_id": job_id, "nodes": "cloud1"}]})
    assert err.value.status == 422 and "job_id" in str(err.value)
    assert store.lease_for_node("cloud1") is None


def test_a_413_is_reported_as_request_too_large(tmp_path, monkeypatch, capsys):
    cfg, store, _, server = _daemon(tmp_path, max_body=1024)
    monkeypatch.setenv("BURSTD_CONFIG", str(tmp_path / "burstd.toml"))
    monkeypatch.delenv("BURSTD_SOCKET", raising=False)
    try:
        jobs = [{"job_id": i, "nodes_alloc": "cloud1"} for i in range(1, 20_000)]  # ~700 KB: past the socket buffer
        _resume_file(tmp_path, monkeypatch, json.dumps({"jobs": jobs}).encode())
        assert run(["resume", "cloud1"]) == 2
        line = _one_line(capsys.readouterr().err)
        assert "413" in line and "request too large" in line and "is the daemon running" not in line
        assert store.lease_for_node("cloud1") is None
    finally:
        server.stop()
        store.close()


def test_a_call_that_arrives_after_the_hooks_deadline_records_nothing(daemon):
    cfg, store, _ = daemon
    with pytest.raises(ApiError) as err:  # a request that spent its hook's whole wait on the way in
        post_unix_json(cfg.api.socket, "/v1/hooks/resume",
                       {"hostlist": "cloud1", "jobs": [{"job_id": 7, "nodes": "cloud1"}], "timeout_s": HOOK_TIMEOUT,
                        "deadline": time.time() - 0.1})
    assert err.value.status == 503 and "deadline passed" in str(err.value) and "nothing was recorded" in str(err.value)
    time.sleep(0.3)
    assert store.lease_for_node("cloud1") is None


def test_a_hook_that_timed_out_behind_a_busy_intake_never_gets_its_lease_later(daemon, tmp_path, monkeypatch,
                                                                                 capsys):
    _, store, rec = daemon
    _resume_file(tmp_path, monkeypatch, json.dumps({"jobs": [JOB]}).encode())
    rec.intake.lock.acquire()  # a cycle reading leases, slow today
    released = threading.Timer(3 * HOOK_TIMEOUT, rec.intake.lock.release)
    released.start()
    t0 = time.monotonic()
    code = run(["resume", "cloud1"])
    took = time.monotonic() - t0
    released.join()
    time.sleep(0.5)  # anything the daemon still meant to do is done by now
    assert code == 3 and took < 2 * HOOK_TIMEOUT
    assert "nothing was recorded" in _one_line(capsys.readouterr().err)
    assert store.lease_for_node("cloud1") is None  # the hook told Slurm no; no lease may say yes
