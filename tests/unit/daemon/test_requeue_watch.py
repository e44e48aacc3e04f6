"""``burstd_jobs_requeued_total`` counts the requeues a job makes itself (issue 26 item 2): the training templates
run ``scontrol requeue`` on a preemption notice, so burstd finds the job pending and requeues nothing."""

from __future__ import annotations

import dataclasses

from burstd.daemon.requeue_watch import RequeueWatch
from burstd.domain.slurm import Job
from tests.unit.daemon.test_job_markets import config, env


def job(job_id: int, state: str, nodes: str = "", restarts: int = 0) -> Job:
    return Job(job_id, "train", "alice", "chem", ("onprem", "cloud"), state, nodes=nodes, restart_count=restarts)


def on_cloud(j: Job) -> bool:
    return j.nodes.startswith("cloud")


def test_a_job_seen_on_a_cloud_node_that_requeued_itself_is_counted_once():
    watch = RequeueWatch()
    assert watch.observe([job(7, "RUNNING", "cloud1")], on_cloud) == 0
    assert watch.observe([job(7, "PENDING", restarts=1)], on_cloud) == 1
    assert watch.observe([job(7, "PENDING", restarts=1)], on_cloud) == 0  # the same requeue, seen again
    assert watch.observe([job(7, "RUNNING", "cloud2", restarts=1)], on_cloud) == 0
    assert watch.observe([job(7, "PENDING", restarts=3)], on_cloud) == 2  # two requeues between two looks


def test_each_jobs_own_requeues_are_kept_after_it_leaves_the_queue_for_burstctl_jobs():
    watch = RequeueWatch()
    watch.observe([job(7, "RUNNING", "cloud1"), job(8, "RUNNING", "cloud2")], on_cloud)
    watch.observe([job(7, "PENDING", restarts=2), job(8, "PENDING", restarts=1)], on_cloud, ours={8})
    watch.observe([], on_cloud)  # both left the queue
    assert watch.requeued == {7: 2}  # 8's requeue was burstd's own: counted where burstd made it


def test_the_per_job_counts_are_bounded(monkeypatch):
    from burstd.daemon import requeue_watch

    monkeypatch.setattr(requeue_watch, "MAX_JOBS_KEPT", 2)
    watch = RequeueWatch()
    running = [job(j, "RUNNING", "cloud1") for j in (1, 2, 3)]
    watch.observe(running, on_cloud)
    watch.observe([job(j, "PENDING", restarts=1) for j in (1, 2, 3)], on_cloud)
    assert watch.requeued == {2: 1, 3: 1}


def test_burstds_own_requeue_is_not_counted_again_and_onprem_jobs_are_not_watched():
    watch = RequeueWatch()
    watch.observe([job(7, "RUNNING", "cloud1"), job(8, "RUNNING", "onprem1")], on_cloud)
    assert watch.observe([job(7, "PENDING", restarts=1), job(8, "PENDING", restarts=1)], on_cloud, ours={7}) == 0


def test_a_job_that_left_the_queue_is_forgotten():
    watch = RequeueWatch()
    watch.observe([job(7, "RUNNING", "cloud1")], on_cloud)
    watch.observe([], on_cloud)
    assert watch.seen == {}
    assert watch.observe([job(7, "PENDING", restarts=1)], on_cloud) == 0


def test_the_daemon_counts_a_template_requeue_in_jobs_requeued_total():
    clock, _, adapter, _, rec = env(config())
    adapter.set_node("cloud1", "ALLOCATED")
    adapter.jobs = [job(7, "RUNNING", "cloud1")]
    rec.cycle()
    adapter.jobs = [dataclasses.replace(adapter.jobs[0], state="PENDING", nodes="", restart_count=1)]
    clock.advance(5)
    rec.cycle()
    assert rec.metrics.jobs_requeued._value.get() == 1
