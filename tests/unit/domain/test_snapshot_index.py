"""Snapshot.jobs_by_node: the node -> jobs index, built once a snapshot."""

from burstd.domain.slurm import Job, Snapshot


def _job(job_id: int, nodes: str) -> Job:
    return Job(job_id, f"j{job_id}", "alice", "acct", ("cloud",), "RUNNING", nodes=nodes)


def test_each_node_lists_its_jobs_in_queue_order_and_the_index_is_built_once():
    snap = Snapshot(0.0, jobs=(_job(1, "cloud[1-2]"), _job(2, ""), _job(3, "cloud2,cloud2"), _job(4, "cloud[")))
    by_node = snap.jobs_by_node()
    assert {node: [j.job_id for j in jobs] for node, jobs in by_node.items()} == {"cloud1": [1], "cloud2": [1, 3]}
    assert snap.jobs_by_node() is by_node  # the snapshot keeps it: not expanded again
