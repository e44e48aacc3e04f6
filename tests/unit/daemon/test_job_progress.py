"""Training progress from both sides (issue 26 item 2): a job reports on itself, sealed in its own MUNGE
credential; burstd turns it into cost per step and shows it in ``GET /v1/jobs``, ``/v1/progress`` and the
metrics. Real munged (a private one) and real uvicorn over TLS; the daemon's edges (Slurm, store) are fakes."""

from __future__ import annotations

import dataclasses
import json
import socket
import tempfile

import httpx
import pytest

from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import ApiServer
from burstd.daemon.job_credentials import JobCaller, MungeRefused, read_unmunge, verify_munge
from burstd.daemon.job_progress import JustStarted, ProgressBook, ReportRefused, judge, parse_report
from burstd.daemon.reconcile import Reconciler
from burstd.domain.budget import Allocation
from burstd.domain.lease import LeaseState
from burstd.domain.slurm import Job, Node
from tests.fakes.tls import make_tls
from tests.munged import private_munged
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

POOL = {"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud", "node_count": 4,
        "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}], "price_per_hour": 0.5}
NOBODY = 65534


def report(job: int, step: int = 100, step_time_s: float = 0.5, **more) -> bytes:
    return json.dumps({"job": job, "step": step, "step_time_s": step_time_s, **more}).encode()


def running(job_id: int, nodes: str, user: str = "nobody") -> Job:
    return Job(job_id, "train", user, "chem", ("cloud",), "RUNNING", nodes=nodes)


@pytest.fixture(scope="module")
def munged():
    with private_munged() as m:
        yield m


@pytest.fixture
def daemon(tmp_path, munged):
    """A daemon API over TLS whose snapshot runs job 7 (nobody's) on cloud1 (a lease at $0.50/h, the host that
    makes the credentials: 127.0.0.1), job 8 (nobody's too) on cloud2 (elsewhere) and job 10 (root's) on cloud1."""
    tls = make_tls(tmp_path)
    token = tmp_path / "admin.token"
    token.write_text("admin-s3cret\n")
    token.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tempfile.mkdtemp(prefix="burstd-api-")
    cfg = parse_config({
        "api": {"socket": f"{run}/burstd.sock", "tcp_listen": f"127.0.0.1:{port}", "token_file": str(token),
                "tls_cert": str(tls.cert), "tls_key": str(tls.key), "munge_socket": munged.socket},
        "daemon": {"state_dir": str(tmp_path / "state")},
        "pools": [POOL],
    })
    clock = FakeClock()
    store = FakeStore(clock)
    lease = store.create_lease(pool="local", node_name="cloud1", price_per_hour_micros=500_000, job_ids=(7,))
    for state in (LeaseState.LAUNCHING, LeaseState.BOOTING, LeaseState.READY):
        store.transition(lease.lease_id, state)
    store.record_allocations(lease.lease_id, [Allocation(7, clock() - 60, account="chem", user="nobody")])
    adapter = FakeAdapter()
    adapter.jobs = [running(7, "cloud1"), running(8, "cloud2"), running(10, "cloud1", user="root")]
    adapter.nodes = {"cloud1": Node("cloud1", "ALLOCATED", ("CLOUD",), address="127.0.0.1"),
                     "cloud2": Node("cloud2", "ALLOCATED", ("CLOUD",), address="10.9.9.9")}
    rec = Reconciler(cfg, store, adapter, {"local": FakeProvider("local", clock)}, first_rule, clock=clock)
    rec.last_snapshot = adapter.snapshot()
    server = ApiServer(create_app(rec, cfg), cfg)
    server.start()
    assert server.wait_started()
    client = httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=str(tls.ca), timeout=10)
    client.ca = str(tls.ca)  # type: ignore[attr-defined]  # for a reporter's own client (tests/unit/train)
    try:
        yield client, rec, munged
    finally:
        client.close()
        server.stop()


def post(client: httpx.Client, job: int, credential: str) -> httpx.Response:
    return client.post(f"/v1/jobs/{job}/progress", headers={"Authorization": f"Munge {credential}"})


def test_a_jobs_own_report_becomes_its_cost_per_step_in_jobs_progress_and_metrics(daemon):
    client, rec, munged = daemon
    r = post(client, 7, munged.encode(report(7, step=1200, step_time_s=0.72, gpu_util=[80.0, 60.0],
                                             steps_per_epoch=1000), uid=NOBODY))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["side"] == "cloud" and body["step"] == 1200 and body["gpu_util"] == 70.0
    assert body["cost_per_step_micro_usd"] == pytest.approx(500_000 * 0.72 / 3600)  # $0.0001 a step
    assert body["cost_per_epoch_micro_usd"] == pytest.approx(100_000.0)  # $0.10 an epoch of 1000 steps
    admin = {"Authorization": "Bearer admin-s3cret"}
    [listed] = client.get("/v1/progress", headers=admin).json()
    assert listed["job_id"] == 7
    [story] = client.get("/v1/jobs", params={"job": 7}, headers=admin).json()
    assert story["progress"]["step"] == 1200
    rec.cycle()
    text = rec.metrics.render().decode()
    assert 'burstd_training_cost_per_step_usd{account="chem",job="7",side="cloud"} 0.0001' in text
    assert 'burstd_training_cost_per_epoch_usd{account="chem",job="7",side="cloud"} 0.1' in text
    assert 'burstd_training_gpu_utilization_ratio{account="chem",job="7",side="cloud"} 0.7' in text
    assert 'burstd_training_reports_total{outcome="ok"} 1.0' in text
    rec.adapter.jobs = []  # the job ended: its series go, its last report stays readable
    rec.cycle()
    assert 'job="7"' not in rec.metrics.render().decode()
    assert rec.progress.get(7) is not None


def test_a_report_for_someone_elses_job_another_job_or_from_another_host_is_refused(daemon):
    client, rec, munged = daemon
    assert post(client, 7, munged.encode(report(7), uid=0)).status_code == 403  # root does not own job 7
    assert post(client, 7, munged.encode(report(8), uid=NOBODY)).status_code == 403  # sealed for job 8
    assert post(client, 8, munged.encode(report(8), uid=NOBODY)).status_code == 403  # made on cloud1, job 8: cloud2
    assert post(client, 9, munged.encode(report(9), uid=NOBODY)).status_code == 403  # not running
    assert rec.progress.all() == []


def test_a_job_started_since_the_snapshot_is_read_from_slurm_once_and_its_report_taken(daemon):
    """A training job's first report comes seconds after its start, before the next cycle's snapshot sees it
    running (a live bed under load refused one so): burstd reads that job from Slurm, once a snapshot."""
    client, rec, munged = daemon
    reads = rec.adapter.snapshots  # the fake has no `squeue -j`: the reconciler reads it from a snapshot
    rec.adapter.jobs.append(running(11, "cloud1"))  # started after rec.last_snapshot was taken
    assert post(client, 11, munged.encode(report(11, step=100), uid=NOBODY)).status_code == 202
    assert post(client, 11, munged.encode(report(11, step=200), uid=NOBODY)).status_code == 202
    assert rec.progress.get(11).step == 200 and rec.adapter.snapshots == reads + 1  # one read for both
    for _ in range(3):  # a job Slurm does not run: refused, and Slurm asked once this snapshot
        assert post(client, 12, munged.encode(report(12), uid=NOBODY)).status_code == 403
    assert rec.adapter.snapshots == reads + 2
    rec.last_snapshot = rec.adapter.snapshot()  # the next cycle's snapshot answers for job 11 itself
    assert post(client, 11, munged.encode(report(11, step=300), uid=NOBODY)).status_code == 202
    assert rec.adapter.snapshots == reads + 3  # only the snapshot above


def test_just_started_reads_a_job_once_a_snapshot_at_most_max_reads_and_survives_slurm_failing():
    asked: list[int] = []

    def read(ids):
        asked.extend(ids)
        if ids[0] == 13:
            raise OSError("squeue: slurmctld not responding")
        return [running(i, "cloud1") for i in ids if i % 2]

    fresh = JustStarted(read)
    first, second = object(), object()
    assert fresh.job(5, first).job_id == 5 and fresh.job(5, first).job_id == 5 and asked == [5]
    assert fresh.job(6, first) is None and fresh.job(6, first) is None and asked == [5, 6]
    assert fresh.job(13, first) is None and asked == [5, 6, 13]  # Slurm failing: refused as before
    assert fresh.job(5, second).job_id == 5 and asked == [5, 6, 13, 5]  # a new snapshot: read again
    for i in range(1000, 1000 + 2 * JustStarted.MAX_READS):
        fresh.job(i, second)
    assert len(asked) == 4 + JustStarted.MAX_READS - 1  # job 5 took one of this snapshot's reads


def test_a_credential_is_good_once_for_its_report_and_for_nothing_else(daemon, tmp_path):
    client, rec, munged = daemon
    cred = munged.encode(report(7), uid=NOBODY)
    assert post(client, 7, cred).status_code == 202
    assert post(client, 7, cred).status_code == 401  # munged refuses a replay
    for method, path in (("GET", "/v1/status"), ("GET", "/v1/jobs"), ("POST", "/v1/pause"),
                         ("POST", "/v1/notices"), ("GET", "/openapi.json")):
        fresh = munged.encode(report(7), uid=NOBODY)
        answer = client.request(method, path, headers={"Authorization": f"Munge {fresh}"}, json={"node": "cloud1"})
        assert answer.status_code == 403, path
    r = client.post("/v1/jobs/7/progress", headers={"Authorization": "Bearer admin-s3cret"})
    assert r.status_code == 403  # not even an admin writes a job's progress
    assert post(client, 7, "MUNGE:" + "A" * 80 + ":").status_code == 401
    assert rec.store.pause_state() is None


def test_a_malformed_report_is_422_and_changes_nothing(daemon):
    client, rec, munged = daemon
    for bad in (b'{"job": 7, "step": 1, "step_time_s": NaN}', b'{"job": 7, "step": -1, "step_time_s": 1}',
                b'{"job": 7, "step": 1, "step_time_s": 1, "other": 2}', b"\xff\xfe", b"[]"):
        r = post(client, 7, munged.encode(bad, uid=NOBODY))
        assert r.status_code == 422, bad
        assert "NaN" not in r.text
    assert rec.progress.all() == []


def test_unmunge_output_reads_and_a_credential_made_with_another_key_is_refused(munged, tmp_path):
    caller = verify_munge(munged.encode(b"hello", uid=NOBODY, gid=NOBODY), socket=munged.socket)
    assert caller == JobCaller(NOBODY, NOBODY, "127.0.0.1", b"hello")
    with private_munged() as other, pytest.raises(MungeRefused):
        verify_munge(other.encode(b"hello"), socket=munged.socket)
    with pytest.raises(MungeRefused, match="not a MUNGE credential"):
        verify_munge("MUNGE:abc;rm -rf /:", socket=munged.socket)
    with pytest.raises(MungeRefused, match="status"):
        read_unmunge(b"STATUS: 15\nENCODE_HOST: h\nUID: 0\nGID: 0\n\nx")


def test_the_judge_and_the_book_pure():
    caller = JobCaller(NOBODY, NOBODY, "10.0.0.5", b"")
    job = running(5, "n1")
    nodes = [Node("n1", "ALLOCATED", address="10.0.0.5")]
    r = parse_report(report(5, step=10, step_time_s=2.0))
    assert judge(caller, r, 5, job, nodes, lambda u: NOBODY) is job
    with pytest.raises(ReportRefused, match="does not own"):
        judge(caller, r, 5, job, nodes, lambda u: None)
    elsewhere = [Node("n1", "ALLOCATED", address="10.0.0.6")]
    with pytest.raises(ReportRefused, match="made on 10.0.0.5"):
        judge(caller, r, 5, job, elsewhere, lambda u: NOBODY)
    assert judge(caller, r, 5, job, elsewhere, lambda u: NOBODY, require_node=False) is job  # uid still checked
    with pytest.raises(ReportRefused, match="does not own"):
        judge(caller, r, 5, job, elsewhere, lambda u: 0, require_node=False)
    book = ProgressBook(limit=2)
    onprem = book.record(job, r, 100.0, 0, on_cloud=False)
    assert onprem.side == "onprem" and onprem.cost_per_step_micros is None
    book.record(running(6, "n1"), parse_report(report(6)), 101.0, 0, on_cloud=False)
    book.record(job, r, 102.0, 0, on_cloud=False)  # job 5 again: now the newest, its count kept
    book.record(running(9, "n1"), parse_report(report(9)), 103.0, 0, on_cloud=False)
    assert [p.job_id for p in book.all()] == [9, 5] and book.get(5).reports == 2


def test_a_restarted_daemon_keeps_what_the_jobs_reported(tmp_path):
    """Issue 26: the book was memory only, so a restart forgot every job's progress (and the work the escalation
    weighs) until each reported again. With the Store it starts from the database; an unreadable row is skipped."""
    from burstd.db.store import Store

    url = f"sqlite:///{tmp_path}/burstd.db"
    store = Store.open(url)
    book = ProgressBook(limit=2, store=store)
    book.record(running(5, "cloud1"), parse_report(report(5, step=40, step_time_s=2.0, steps_per_epoch=10)),
                100.0, 360_000, on_cloud=True)
    book.record(running(6, "n1"), parse_report(report(6, step=7)), 101.0, 0, on_cloud=False)
    book.record(running(5, "cloud1"), parse_report(report(5, step=50, step_time_s=2.0, steps_per_epoch=10)),
                102.0, 360_000, on_cloud=True)
    store.save_progress(7, "{not json", at=50.0)  # older than both, so within the newest 3 it is read and dropped
    store.close()

    again = ProgressBook(limit=3, store=Store.open(url))  # the restarted daemon's
    assert [(p.job_id, p.step, p.reports) for p in again.all()] == [(5, 50, 2), (6, 7, 1)]
    assert again.get(5) == book.get(5) and again.get(5).cost_per_epoch_micros == pytest.approx(2000.0)
    assert again.work_done_s() == {5: 100.0, 6: 3.5}
    assert ProgressBook(limit=1, store=Store.open(url)).all() == [book.get(5)]  # the newest first
    # a standby's book, read when it started; the leader takes a report meanwhile; the standby takes over
    standby, leader = ProgressBook(store=Store.open(url)), ProgressBook(store=Store.open(url))
    leader.record(running(8, "n1"), parse_report(report(8, step=3)), 103.0, 0, on_cloud=False)
    assert standby.get(8) is None
    standby.reload()
    assert standby.get(8) == leader.get(8) and standby.current


def test_the_work_a_requeued_job_reported_keeps_it_on_spot_where_without_it_it_would_escalate():
    """Uniform Progress: a preempted job behind its line may only go on-demand. Without a report burstd counts
    none of its work done; with one (steps x step time) it sees the job is on its line and keeps it on spot."""
    from tests.unit.daemon.test_job_markets import config as market_config
    from tests.unit.daemon.test_job_markets import env, pending
    from tests.unit.daemon.test_job_markets import running as busy

    def market(with_report: bool) -> str:
        clock, _, adapter, _, rec = env(market_config(max_preemptions_spot=5))
        # submitted 3000 s ago with an hour's limit: at progress_slack 2, 1500 s of work are due by now
        job = dataclasses.replace(pending(clock, restart_count=1), submit_time=int(clock() - 3000), time_limit_min=60)
        adapter.jobs = [busy(clock), job]
        if with_report:
            rec.progress.record(job, parse_report(report(7, step=3000, step_time_s=0.5)), clock(), 0, on_cloud=True)
        rec.cycle()
        [eligible] = rec.last_decisions.eligible
        return eligible.market

    assert market(with_report=False) == "on-demand"
    assert market(with_report=True) == "spot"
