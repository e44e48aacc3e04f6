"""The Slurm adapter on the live bed (22.05, or 24.11 / 26.05 with BURSTD_BED_SLURM_RELEASE): submit real jobs with sbatch, read them back through the cli
backend (text and JSON paths) and the rest backend (slurmrestd, JWT), and change them through the adapter.

Run alone on a bed of your own:  BURSTD_BED_NAME=slurmad BURSTD_BED_SLOT=41 pytest tests/integration/test_slurm_adapter.py
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from burstd.config import SlurmConfig
from burstd.slurm import make_adapter
from burstd.slurm.base import SlurmError
from burstd.slurm.cli import CliAdapter
from burstd.slurm.rest import RestAdapter

pytestmark = pytest.mark.bed


@pytest.fixture(scope="module")
def cli(slurm_bed) -> CliAdapter:
    return make_adapter(SlurmConfig(backend="cli", conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir))


@pytest.fixture(scope="module")
def cli_json(slurm_bed) -> CliAdapter:
    return CliAdapter(SlurmConfig(backend="cli", conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir, job_format="json"))


@pytest.fixture(scope="module")
def rest(slurm_bed) -> RestAdapter:
    # token from `scontrol token` (run with the bed's SLURM_CONF), version negotiated from /openapi/v3
    return make_adapter(SlurmConfig(backend="rest", conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir,
                                    rest_url=slurm_bed.rest_url))


@pytest.fixture
def cleanup(slurm_bed):
    jobs: list[int] = []
    yield jobs
    if jobs:
        slurm_bed.run(["scancel", *map(str, jobs)], check=False)


def _held(slurm_bed, user, cleanup, *opts: str) -> int:
    job = slurm_bed.sbatch(["-H", "-o", "/dev/null", *opts], "#!/bin/sh\ntrue\n", user=user)
    cleanup.append(job)
    return job


def _jobs(snap, ids):
    return {j.job_id: j for j in snap.jobs if j.job_id in ids or (j.array_job_id in ids)}


def test_submitted_jobs_read_back_the_same_through_cli_text_cli_json_and_rest(slurm_bed, bed_user, cleanup, cli,
                                                                              cli_json, rest):
    onprem, cloud = slurm_bed.onprem_partition, slurm_bed.cloud_partition
    plain = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "plain", "--comment=a comment",
                  "--account=physics", "-t", "30", "--mem=300")
    multi = _held(slurm_bed, bed_user, cleanup, "-p", f"{onprem},{cloud}", "-J", "multi", "-n", "2")
    array = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "arr", "--array=1-5%2")
    running = slurm_bed.sbatch(["-p", onprem, "-o", "/dev/null", "-J", "runner", "-t", "10"],
                               "#!/bin/sh\nsleep 300\n", user=bed_user)
    cleanup.append(running)
    slurm_bed.wait_for(lambda: slurm_bed.job(running).get("JobState") == "RUNNING", 60, "the running job")
    ids = {plain, multi, array, running}

    a, b, c = (_jobs(x.snapshot(), ids) for x in (cli, cli_json, rest))
    assert set(a) == ids and a == b == c  # same domain objects from every path

    assert a[plain].account == "physics" and a[plain].comment == "a comment" and a[plain].user == bed_user
    assert a[plain].time_limit_min == 30 and a[plain].memory_mb == 300 and a[plain].hold
    assert a[plain].reason == "JobHeldUser" and a[plain].state == "PENDING" and a[plain].submit_time
    assert a[multi].partitions == (onprem, cloud) and a[multi].cpus == 2
    assert a[array].array_tasks == "1-5%2" and a[array].array_job_id == array and a[array].array_task_id is None
    assert a[running].state == "RUNNING" and a[running].nodes in slurm_bed.onprem_nodes
    assert a[running].start_time and a[running].time_limit_min == 10


def test_a_declared_deadline_reads_the_same_through_cli_text_cli_json_and_rest(slurm_bed, bed_user, cleanup, cli,
                                                                               cli_json, rest):
    """sbatch --deadline reaches Job.deadline on every path (issue 25): squeue -O Deadline, squeue --json, REST."""
    onprem = slurm_bed.onprem_partition
    declared = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "due", "-t", "10", "--deadline=now+1day")
    plain = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "free", "-t", "10")
    ids = {declared, plain}
    a, b, c = (_jobs(x.snapshot(), ids) for x in (cli, cli_json, rest))
    assert set(a) == ids and a == b == c
    deadline = a[declared].deadline
    assert deadline is not None and abs(deadline - (a[declared].submit_time or 0) - 86400) <= 120
    assert a[plain].deadline is None


def test_where_jobs_may_run_reads_the_same_through_cli_text_cli_json_and_rest(slurm_bed, bed_user, cleanup, cli,
                                                                               cli_json, rest):
    """sbatch -w, -x and --reservation reach Job.required_nodes, Job.excluded_nodes and Job.reservation on every
    path: squeue -O ReqNodes, Reservation and ExcNodes (22.05: squeue -o %A|%x beside it), squeue --json, REST.
    A MAGNETIC reservation shows on no pending job that did not ask for it."""
    onprem = slurm_bed.onprem_partition
    node = slurm_bed.onprem_nodes[-1]
    try:
        for name, on, flags in (("maint", node, []), ("drawn", slurm_bed.onprem_nodes[0], ["Flags=MAGNETIC"])):
            slurm_bed.run(["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={on}",
                           f"Users={bed_user}", "StartTime=now", "Duration=60", *flags])
        pinned = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "pinned", "-t", "10", "-w", node)
        avoiding = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "avoiding", "-t", "10", "-x", node)
        reserved = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "reserved", "-t", "10",
                         "--reservation=maint")
        plain = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "free", "-t", "10")
        ids = {pinned, avoiding, reserved, plain}
        a, b, c = (_jobs(x.snapshot(), ids) for x in (cli, cli_json, rest))
    finally:
        for name in ("maint", "drawn"):
            slurm_bed.run(["scontrol", "delete", f"ReservationName={name}"], check=False)
    assert set(a) == ids and a == b == c
    assert (a[pinned].required_nodes, a[pinned].excluded_nodes, a[pinned].reservation) == (node, "", "")
    assert (a[avoiding].required_nodes, a[avoiding].excluded_nodes, a[avoiding].reservation) == ("", node, "")
    assert (a[reserved].required_nodes, a[reserved].excluded_nodes, a[reserved].reservation) == ("", "", "maint")
    assert (a[plain].required_nodes, a[plain].excluded_nodes, a[plain].reservation) == ("", "", "")


def test_every_job_shape_of_the_fixtures_workload_reads_the_same_through_every_path(slurm_bed, bed_user, other_user,
                                                                                    cleanup, cli, cli_json, rest):
    """The job shapes of tests/data/slurm-fixtures/workload.sh, submitted live on this bed's release: cli text,
    cli JSON and REST give the same domain objects for each."""
    onprem, cloud = slurm_bed.onprem_partition, slurm_bed.cloud_partition
    target = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "dep_target")

    def submit(user, *opts, script="#!/bin/sh\nsleep 1\n"):
        job = slurm_bed.sbatch(["-o", "/dev/null", *opts], script, user=user)
        cleanup.append(job)
        return job

    het = "#!/bin/sh\n#SBATCH -p {p} -n 1\n#SBATCH hetjob\n#SBATCH -p {p} -n 1\nsleep 1\n".format(p=onprem)
    jobs = {
        "held_user": _held(slurm_bed, bed_user, cleanup, "-p", onprem, "--comment=held by user"),
        "sig_requeue": _held(slurm_bed, bed_user, cleanup, "-p", onprem, "--signal=B:USR1@60", "--requeue",
                             "-t", "30"),
        "arr_cloud": _held(slurm_bed, bed_user, cleanup, "-p", cloud, "--array=0-3%1", "-t", "20"),
        "multi_part": _held(slurm_bed, bed_user, cleanup, "-p", f"{onprem},{cloud}", "--constraint=cloud"),
        "bob_excl": _held(slurm_bed, other_user, cleanup, "-p", onprem, "--exclusive", "-t", "1-00:00:00",
                          "--mail-type=END"),
        "begin_later": submit(bed_user, "-p", onprem, "--begin=now+2hours"),
        "held_admin": submit(bed_user, "-p", onprem, "--begin=now+1hour"),
        "bob_dep": submit(other_user, "-p", onprem, f"--dependency=afterok:{target}", "--nice=100", "-n", "2",
                          "--mem-per-cpu=100", "--account=chemistry"),
        "het_pair": submit(bed_user, "-H", script=het),
    }
    slurm_bed.run(["scontrol", "hold", str(jobs["held_admin"])])
    ids = set(jobs.values())

    def shapes(adapter):
        return {j.job_id: j for j in adapter.snapshot().jobs
                if j.job_id in ids or j.array_job_id in ids or j.het_job_id in ids}

    a, b, c = (shapes(x) for x in (cli, cli_json, rest))
    assert set(a) >= ids and a == b == c
    assert a[jobs["held_admin"]].reason == "JobHeldAdmin" and a[jobs["begin_later"]].reason == "BeginTime"
    assert a[jobs["bob_dep"]].reason == "Dependency" and a[jobs["bob_dep"]].user == other_user
    assert a[jobs["arr_cloud"]].array_tasks == "0-3%1"
    assert {j.het_job_id for j in a.values() if j.het_job_id == jobs["het_pair"]} == {jobs["het_pair"]}
    assert len([j for j in a.values() if j.het_job_id == jobs["het_pair"]]) == 2


def test_nodes_and_partitions_agree_between_cli_and_rest(slurm_bed, cli, rest):
    s1, s2 = cli.snapshot(), rest.snapshot()
    stable = lambda n: replace(n, state="", flags=(), reason="", boot_time=None)  # noqa: E731
    assert [stable(n) for n in s1.nodes] == [stable(n) for n in s2.nodes]
    assert s1.partitions == s2.partitions
    names = {n.name for n in s1.nodes}
    assert names >= set(slurm_bed.onprem_nodes) | set(slurm_bed.cloud_nodes)
    for name in slurm_bed.cloud_nodes:
        node = s1.node(name)
        assert node.is_cloud and slurm_bed.cloud_partition in node.partitions
    for name in slurm_bed.onprem_nodes:
        assert s1.node(name).address == slurm_bed.config.node_address(name).split("/")[0]
    parts = {p.name: p for p in s1.partitions}
    assert parts[slurm_bed.onprem_partition].max_time_min is None
    # 24.11's partition JSON (CLI and REST) has no DEFAULT flag at all (tests/data/slurm-fixtures/24.11); 22.05's
    # text and 26.05's flags do
    assert parts[slurm_bed.onprem_partition].default is (slurm_bed.slurm_release() != (24, 11))


@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_cloud_partition_added_to_a_pending_job_is_accepted_by_slurm(slurm_bed, bed_user, cleanup, backend,
                                                                     cli, rest):
    adapter = {"cli": cli, "rest": rest}[backend]
    onprem, cloud = slurm_bed.onprem_partition, slurm_bed.cloud_partition
    job = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", f"grow-{backend}")
    adapter.add_partition(job, cloud)
    assert slurm_bed.job(job)["Partition"] == f"{onprem},{cloud}"  # what Slurm itself says
    assert _jobs(cli.snapshot(), {job})[job].partitions == (onprem, cloud)
    adapter.remove_partition(job, cloud)
    assert slurm_bed.job(job)["Partition"] == onprem
    with pytest.raises(SlurmError):
        adapter.set_partitions(job, ["no-such-partition"])
    assert slurm_bed.job(job)["Partition"] == onprem  # nothing changed


def test_drain_and_resume_a_node(slurm_bed, cli):
    node = slurm_bed.onprem_nodes[-1]
    cli.drain([node], "burstd test: maintenance window")
    try:
        drained = slurm_bed.wait_for(lambda: (n := cli.snapshot().node(node)).is_drained and n, 40, "drain")
        assert drained.reason == "burstd test: maintenance window"
    finally:
        cli.resume([node])
    slurm_bed.wait_for(lambda: not cli.snapshot().node(node).is_drained, 40, f"{node} resumed")


def test_requeue_a_running_job(slurm_bed, bed_user, cleanup, cli):
    job = slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-o", "/dev/null", "--requeue", "-J", "rq"],
                           "#!/bin/sh\nsleep 300\n", user=bed_user)
    cleanup.append(job)
    slurm_bed.wait_for(lambda: slurm_bed.job(job).get("JobState") == "RUNNING", 60, "the job to run")
    cli.requeue(job)
    back = slurm_bed.wait_for(lambda: (j := _jobs(cli.snapshot(), {job}).get(job)) and j.is_pending and j, 60,
                              "the job back in the queue")
    assert back.restart_count == 1 and back.reason in ("BeginTime", "None", "Priority", "Resources")


def test_expedited_requeue_is_slurms_where_the_release_and_the_job_have_it(slurm_bed, bed_user, cleanup, cli):
    """25.11+ (`enable_expedited_requeue` in the generated slurm.conf): a job submitted with
    `--requeue=expedite` is requeued by Slurm eligible at once, and burstd adds no `starttime=now`; a plain
    `--requeue` job, and every job before 25.11, gets burstd's `update starttime=now`."""
    opts = ["-p", slurm_bed.onprem_partition, "-o", "/dev/null", "-t", "10"]
    if cli.features.has("expedited_requeue"):
        expedite = slurm_bed.sbatch([*opts, "--requeue=expedite", "-J", "rqx"], "#!/bin/sh\nsleep 300\n", user=bed_user)
        cleanup.append(expedite)
    else:
        expedite = None  # sbatch before 25.11 refuses `--requeue=expedite`
    plain = slurm_bed.sbatch([*opts, "--requeue", "-J", "rqp"], "#!/bin/sh\nsleep 300\n", user=bed_user)
    cleanup.append(plain)
    jobs = [j for j in (expedite, plain) if j is not None]
    slurm_bed.wait_for(lambda: all(slurm_bed.job(j).get("JobState") == "RUNNING" for j in jobs), 60, "the jobs to run")
    for job in jobs:
        before = len(cli.calls)
        cli.requeue(job, expedite=True)
        updates = [c[2:] for c in cli.calls[before:] if c[0].endswith("scontrol") and c[1] == "update"]
        assert updates == ([] if job == expedite else [[f"jobid={job}", "starttime=now+2"]]), job
    for job in jobs:  # eligible at once either way (no BeginTime wait of cred_expire), once its old run has ended
        seen: list[tuple] = []

        def eligible(job=job):
            i = slurm_bed.job(job)
            seen.append((i.get("JobState"), i.get("Reason"), i.get("Restarts"), i.get("EligibleTime")))
            return (i.get("Restarts") == "1" and i.get("JobState") in ("PENDING", "RUNNING", "CONFIGURING")
                    and i.get("Reason") != "BeginTime")

        try:
            slurm_bed.wait_for(eligible, 30, f"job {job} eligible again")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; (state, reason, restarts, eligible) seen: {sorted(set(seen))}") from None
        _runs_again(slurm_bed, job)
    if expedite is not None:
        assert slurm_bed.job(expedite).get("ExpeditedRequeue") == "Yes"


def _runs_again(bed, job: int) -> None:
    """The requeued job's second run starts and keeps running: a start in the requeue's own second, on the node
    the job left, is killed at once ("Job credential revoked") and the job fails for good."""
    bed.wait_for(lambda: (i := bed.job(job)).get("JobState") == "RUNNING" and i.get("Restarts") == "1", 60,
                 f"job {job}'s second run")
    time.sleep(3)
    assert bed.job(job).get("JobState") == "RUNNING", bed.job(job)


def test_start_now_ends_the_requeue_hold_of_a_job_that_requeued_itself(slurm_bed, bed_user, cleanup, cli):
    """A job that runs `scontrol requeue` on itself (the templates do, after a notice's checkpoint) waits out
    Slurm's requeue hold (Reason=BeginTime, cred_expire + 1 s); `start_now` makes it eligible at once."""
    script = "#!/bin/sh\nif [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then scontrol requeue $SLURM_JOB_ID; fi\nsleep 300\n"
    job = slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-o", "/dev/null", "-t", "10", "--requeue"], script,
                           user=bed_user)
    cleanup.append(job)
    held = slurm_bed.wait_for(lambda: (j := _jobs(cli.snapshot(), {job}).get(job)) and j.is_pending
                              and j.reason == "BeginTime" and j, 60, "the job held after its own requeue")
    assert held.restart_count == 1 and held.eligible_time is not None and held.eligible_time > time.time()
    cli.start_now(job)
    after = slurm_bed.wait_for(lambda: (j := _jobs(cli.snapshot(), {job}).get(job)) and j.reason != "BeginTime"
                               and j, 30, "the hold gone")
    assert after.restart_count == 1
    # ended by start_now, not waited out: the job became eligible before the hold's end (Slurm's own record, not
    # this test's clock, which a loaded machine stretches past the bed's 11 s hold)
    assert after.eligible_time is not None and after.eligible_time < held.eligible_time, (after, held)
    _runs_again(slurm_bed, job)


def test_slurmctld_health_is_readyz_where_the_release_serves_it(slurm_bed, cli):
    """25.11+: `GET /readyz` on slurmctld's own port; before: `scontrol ping`. Both say ready on a live bed."""
    health = cli.ctld_health()
    assert health["ok"] is True, health
    if cli.features.has("ctld_http"):
        assert health["via"] == "readyz" and health["url"].endswith(f":{slurm_bed.config.ctld_port_}/readyz")
        assert health["detail"] in ("200", "204")
    else:
        assert health["via"] == "scontrol ping" and "is UP" in health["detail"]


def test_signal_reaches_the_batch_shell(slurm_bed, bed_user, cleanup, cli):
    wd = slurm_bed.workdir(bed_user)
    marker = Path(wd) / f"sig-{uuid.uuid4().hex}.txt"
    ready = Path(str(marker) + ".ready")
    script = (f"#!/bin/bash\ntrap 'echo got USR1 > {marker}; exit 0' USR1\ntouch {ready}\n"
              "for i in $(seq 300); do sleep 1; done\n")
    job = slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-o", "/dev/null", "-J", "sig"], script, user=bed_user)
    cleanup.append(job)
    slurm_bed.wait_for(ready.exists, 60, "the batch shell to set its trap")  # RUNNING comes before the trap
    cli.signal(job, "USR1", batch=True)
    assert slurm_bed.wait_for(lambda: marker.exists() and marker.read_text(), 30, "the trap") == "got USR1\n"


def test_shell_metacharacters_round_trip_and_run_nothing(slurm_bed, bed_user, cleanup, cli, cli_json, rest):
    pwned = Path(f"/tmp/burstd-pwned-{uuid.uuid4().hex}")
    evil = f'$(touch {pwned}); echo "x"\n|'
    job = _held(slurm_bed, bed_user, cleanup, "-p", slurm_bed.onprem_partition, "-J", evil, f"--comment={evil}",
                f"--account=acct{evil}")
    views = [_jobs(a.snapshot(), {job})[job] for a in (cli, cli_json, rest)]
    # with slurmdbd (and no enforcement) Slurm replaces an account it does not know by the user's default
    account = slurm_bed.run(["squeue", "-h", "-j", str(job), "-o", "%a"]).stdout.strip() \
        if slurm_bed.config.accounting else f"acct{evil}"
    for j in views:
        assert (j.name, j.comment, j.account) == (evil, evil, account)
    assert cli.text_fallbacks == 0  # newlines and shell syntax do not upset the text path
    cli.add_partition(job, slurm_bed.cloud_partition)
    assert not pwned.exists()


def test_a_name_with_the_text_separator_falls_back_to_json_and_stays_exact(slurm_bed, bed_user, cleanup):
    adapter = CliAdapter(SlurmConfig(conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir))
    name = "tricky\x1fname\x1e"
    job = _held(slurm_bed, bed_user, cleanup, "-p", slurm_bed.onprem_partition, "-J", name)
    got = _jobs(adapter.snapshot(), {job})[job]
    assert got.name == name and adapter.text_fallbacks == 1


BUSY = {"POWERING_DOWN", "POWERING_UP", "POWER_DOWN", "DRAIN", "COMPLETING"}


def _settled(node) -> bool:
    """Idle, powered down, and nothing pending: Slurm resumes it on the next request (a node still holding a
    power-up, even one flagged POWERED_DOWN, takes the next job and waits ResumeTimeout for it)."""
    return bool(node) and node.state == "IDLE" and node.is_powered_down and not BUSY & set(node.flags)


def _idle_powered_down_cloud_node(bed, cli, timeout: float = 180) -> str:
    """A cloud node Slurm will resume on request: earlier tests on the session bed may leave nodes powering
    down (SuspendTimeout) or drained by a preemption story, and Slurm ignores POWER_UP for those."""

    def pick():
        snap = cli.snapshot()
        return next((name for name in bed.cloud_nodes if _settled(snap.node(name))), None)

    return bed.wait_for(pick, timeout, "an idle powered-down cloud node")


def _leave_settled(bed, cli, node: str) -> None:
    """A power test hands the session bed on as it found it: a power-down that lands while slurmctld still holds
    the power-up is carried out, and the power-up dropped, only when the power-up times out (ResumeTimeout)."""
    bed.wait_for(lambda: _settled(cli.snapshot().node(node)),
                 bed.config.resume_timeout + bed.config.suspend_timeout + 30, f"{node} powered down and settled")


def test_power_up_power_down_and_node_address_with_stub_hooks(slurm_bed, cli):
    node = _idle_powered_down_cloud_node(slurm_bed, cli)
    with slurm_bed.hooks("stub"):
        mark = slurm_bed.hooks_log.stat().st_size if slurm_bed.hooks_log.exists() else 0
        cli.power_up([node])
        slurm_bed.wait_for(lambda: f" resume {node}" in _log_since(slurm_bed, mark), 40, "the resume hook")
        assert cli.snapshot().node(node).is_powering_up
        cli.power_down([node], force=True, reason="burstd test")
        slurm_bed.wait_for(lambda: f" suspend {node}" in _log_since(slurm_bed, mark), 40, "the suspend hook")
        _leave_settled(slurm_bed, cli, node)
    # the power-down's reason outlives it on the idle~ node; clearing it leaves the node as it is
    assert cli.snapshot().node(node).reason == "burstd test"
    cli.clear_reason([node])
    after = cli.snapshot().node(node)
    assert after.reason == "" and after.is_powered_down and after.state == "IDLE", after
    cli.set_node_address(node, "10.250.0.9", node)
    assert cli.snapshot().node(node).address == "10.250.0.9"
    cli.set_node_address(node, node, node)
    assert cli.snapshot().node(node).address == node


def test_rest_node_actions_where_the_served_version_has_them(rest, slurm_bed):
    node = slurm_bed.onprem_nodes[0]
    if rest.version == "v0.0.38":  # Slurm 22.05
        with pytest.raises(SlurmError, match="v0.0.38 has no endpoint to drain"):
            rest.drain([node], "x")
        return
    assert rest.version == slurm_bed.rest_data_version  # 24.11: v0.0.42, 26.05: v0.0.45
    rest.drain([node], "burstd rest test")
    try:
        slurm_bed.wait_for(lambda: "DRAIN" in slurm_bed.node(node).get("State", ""), 30, f"{node} drained")
        assert slurm_bed.node(node).get("Reason", "").startswith("burstd rest test")
    finally:
        rest.resume([node])
    slurm_bed.wait_for(lambda: "DRAIN" not in slurm_bed.node(node).get("State", ""), 30, f"{node} resumed")


def test_rest_requeue_where_the_served_version_has_it(rest, slurm_bed, bed_user, cleanup):
    job = slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "--requeue", "-o", "/dev/null"],
                           "#!/bin/sh\nsleep 300\n", user=bed_user)
    cleanup.append(job)
    slurm_bed.wait_for(lambda: slurm_bed.job(job).get("JobState") == "RUNNING", 60, f"job {job} running")
    if rest.version < "v0.0.45":
        with pytest.raises(SlurmError, match="no endpoint to requeue"):
            rest.requeue(job)
        return
    rest.requeue(job, expedite=True)
    slurm_bed.wait_for(lambda: slurm_bed.job(job).get("Restarts") == "1", 30, f"job {job} requeued")


def test_rest_backend_keeps_the_cloud_gate_through_scontrol(rest, slurm_bed, bed_user, cleanup):
    """slurmrestd has no call for a partition's account lists or an admin hold with its reason: the rest backend
    makes them with scontrol (issue 21), so the daemon's cloud gate holds on it, on every release."""
    from burstd.domain.partition_access import PartitionAccess

    part = slurm_bed.cloud_partition
    before = rest.partition_access(part)
    try:
        rest.set_partition_access(part, PartitionAccess(allow=None, deny=("nomoney",)))
        assert rest.partition_access(part).deny == ("nomoney",)
        assert "DenyAccounts=nomoney" in slurm_bed.run(["scontrol", "show", "partition", part, "-o"]).stdout
    finally:
        rest.set_partition_access(part, before)
    assert rest.partition_access(part) == before
    job = _held(slurm_bed, bed_user, cleanup)  # a user hold: burstd's admin hold replaces it, with the reason
    rest.hold_with_reason(job, "burstd: test hold")
    shown = slurm_bed.run(["scontrol", "show", "job", str(job)]).stdout
    assert re.search(r"AdminComment=burstd: test hold\s*$", shown, re.M), shown
    assert slurm_bed.job(job).get("Reason") == "JobHeldAdmin", shown


def test_instance_id_and_type_are_recorded_where_the_release_has_them(slurm_bed, cli):
    if not cli.features.has("instance_fields"):  # 22.05: nothing is run, nothing changes
        node = slurm_bed.cloud_nodes[-1]
        assert cli.set_instance(node, "i-0burstdtest", "ns.small") is False
        assert "InstanceId" not in slurm_bed.node(node)
        return
    node = _idle_powered_down_cloud_node(slurm_bed, cli)
    with slurm_bed.hooks("bare"):  # slurmdbd records a node's instance for the time it is up
        cli.power_up([node])
        try:
            slurm_bed.wait_for(lambda: (lambda n: n.state == "IDLE" and not n.is_powering_up
                                        and not n.is_powered_down)(cli.snapshot().node(node)), 60, f"{node} up")
            assert cli.set_instance(node, "i-0burstdtest", "ns.small") is True
            info = slurm_bed.node(node)
            assert (info["InstanceId"], info["InstanceType"]) == ("i-0burstdtest", "ns.small")

            def listed():  # `sacctmgr show instance`: where the node's jobs ran (what `spend` can join on)
                out = slurm_bed.run(["sacctmgr", "-n", "-P", "show", "instance",
                                     "format=nodename,instanceid,instancetype"], check=False).stdout
                return f"{node}|i-0burstdtest|ns.small" in out.splitlines()
            slurm_bed.wait_for(listed, 30, "sacctmgr show instance to list the instance")
        finally:
            cli.power_down([node], force=True)
            _leave_settled(slurm_bed, cli, node)


def test_the_release_decides_the_power_commands(slurm_bed, cli):
    """`scontrol power` on 24.05+, `update state=POWER_*` before: the adapter asks the live version."""
    node = _idle_powered_down_cloud_node(slurm_bed, cli)
    with slurm_bed.hooks("stub"):
        mark = slurm_bed.hooks_log.stat().st_size if slurm_bed.hooks_log.exists() else 0
        before = len(cli.calls)
        cli.power_up([node])
        used = [c[1:3] for c in cli.calls[before:] if c[0].endswith("scontrol")]
        # the power-down once Slurm has run the resume hook, as burstd's would come: one that lands while slurmctld
        # still holds the power-up is carried out only when the power-up times out (ResumeTimeout), and the node
        # it leaves behind takes the next test's job and makes it wait that long
        slurm_bed.wait_for(lambda: f" resume {node}" in _log_since(slurm_bed, mark), 40, "the resume hook")
        before = len(cli.calls)
        cli.power_down([node], force=True)
        used += [c[1:3] for c in cli.calls[before:] if c[0].endswith("scontrol")]
        _leave_settled(slurm_bed, cli, node)
    if cli.features.has("power_verb"):
        assert used == [["power", "up"], ["power", "down"]]
    else:
        assert used == [["update", f"nodename={node}"]] * 2


def _log_since(bed, offset: int) -> str:
    with open(bed.hooks_log) as fh:
        fh.seek(offset)
        return fh.read()


def test_job_names_with_separators_never_forge_records_on_the_bed(slurm_bed, bed_user, cleanup, cli_json):
    """Issue 9 item 1: a name carrying the text path's separators and a whole forged record (the victim's id,
    another account, a huge priority) reads back exactly as ``squeue --json`` has it, and the victim is
    untouched; a comment holding a bare record terminator (no unit separator) stays on the fast path."""
    from burstd.slurm import squeue_text

    onprem = slurm_bed.onprem_partition
    victim = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "victim", "--comment=burst:no")
    fields = dict.fromkeys(squeue_text.SQUEUE_TEXT_FIELDS, "N/A")
    fields |= {"JobID": str(victim), "ArrayJobID": str(victim), "UserName": bed_user, "Account": "forged",
               "Partition": onprem, "PriorityLong": "999999", "NumNodes": "1", "NumCPUs": "1", "State": "PENDING",
               "Reason": "Priority", "RestartCnt": "0", "Comment": "burst:yes", "Name": "forged"}
    forged = squeue_text.FIELD_SEP.join(fields[f] for f in squeue_text.SQUEUE_TEXT_FIELDS)
    evil_name = "x" + squeue_text.RECORD_END + "\n" + forged
    evil_comment = "c" + squeue_text.RECORD_END + "\n" + forged.replace(squeue_text.FIELD_SEP, " ")
    attacker = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", evil_name)
    quiet = _held(slurm_bed, bed_user, cleanup, "-p", onprem, "-J", "quiet", f"--comment={evil_comment}")

    adapter = CliAdapter(SlurmConfig(conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir))
    seen = _jobs(adapter.snapshot(), {victim, attacker, quiet})
    truth = _jobs(cli_json.snapshot(), {victim, attacker, quiet})
    assert seen == truth and set(seen) == {victim, attacker, quiet}
    assert (seen[victim].comment, seen[victim].name) == ("burst:no", "victim")
    assert seen[victim].account == truth[victim].account != "forged"
    assert seen[attacker].name == evil_name and seen[quiet].comment == evil_comment
    assert adapter.text_fallbacks == 1  # the unit separators in the name: that snapshot read JSON

    # with the separator-bearing name gone, the comment's bare terminator stays on the text path
    slurm_bed.run(["scancel", str(attacker)])
    slurm_bed.wait_for(lambda: attacker not in _jobs(adapter.snapshot(), {attacker}), 30, "the job to leave")
    again = _jobs(adapter.snapshot(), {victim, quiet})
    assert again[quiet].comment == evil_comment and again[victim].comment == "burst:no"
    assert adapter.text_fallbacks == 1


def test_a_held_job_named_with_invalid_utf8_leaves_every_backend_reading_the_queue(slurm_bed, bed_user, cleanup,
                                                                                  cli, cli_json, rest):
    """Issue 21 item 4: Slurm keeps a job's name byte for byte, and slurmrestd's job list then holds invalid
    UTF-8. Every snapshot used to fail on the rest backend while the job sat in the queue; now the bad bytes
    read as U+FFFD on every path, and the other jobs read as before."""
    plain = _held(slurm_bed, bed_user, cleanup, "-p", slurm_bed.onprem_partition, "-J", "plain")
    # a str argument holding surrogate escapes reaches sbatch as the raw bytes b"bad\xff\xfe name"
    bad = _held(slurm_bed, bed_user, cleanup, "-p", slurm_bed.onprem_partition, "-J", "bad\udcff\udcfe name")
    for adapter in (rest, cli, cli_json):
        seen = _jobs(adapter.snapshot(), {plain, bad})
        assert set(seen) == {plain, bad}, adapter
        assert seen[bad].name == "bad\ufffd\ufffd name" and seen[plain].name == "plain"
        assert seen[bad].state == "PENDING"


def test_sacct_reads_every_run_of_a_requeued_job_the_same_as_json_and_as_delimited_text(slurm_bed, bed_user,
                                                                                         cleanup, cli):
    """Issue 21 item 5 and issue 26, on the live release: ``sacct --json`` is what the adapter reads (22.05
    included, whose JSON path chokes on SLURM_TIME_FORMAT=%s), a requeued job has a record a run, and the -P
    fallback with its one-time delimiter reads the very same rows."""
    assert slurm_bed.config.accounting  # the test bed runs slurmdbd unless told otherwise
    since = time.time() - 5
    job = slurm_bed.sbatch(["-p", slurm_bed.onprem_partition, "-o", "/dev/null", "--requeue", "-J", "two\nruns|x"],
                           "#!/bin/sh\nsleep 300\n", user=bed_user)
    cleanup.append(job)
    # (bed.job reads `scontrol show job -o`, one line: the newline in the name would cut it)
    slurm_bed.wait_for(lambda: cli.job_state(job) == "RUNNING", 60, "the job to run")
    cli.requeue(job)

    def runs(adapter):
        return sorted((r.job_id, r.state, r.nodes, r.account) for r in adapter.sacct_jobs(since) if r.job_id == job)

    got = slurm_bed.wait_for(lambda: len(r := runs(cli)) >= 2 and r, 60, "sacct to list both runs of the job")
    # the second run pends out its requeue hold, or already runs when a loaded machine reads it after the hold
    assert [r[1] for r in got] in (["PENDING", "REQUEUED"], ["REQUEUED", "RUNNING"]), got
    requeued = next(r for r in got if r[1] == "REQUEUED")
    assert requeued[2] and all(node in slurm_bed.onprem_nodes for node in requeued[2]), got
    assert any("--json" in argv for argv in cli.calls) and not any("-P" in argv for argv in cli.calls)

    class NoJson(CliAdapter):  # a Slurm without the JSON plugins: sacct -P with a one-time delimiter
        def run(self, cmd, args, env=None):
            if "--json" in args:
                raise SlurmError("sacct: fatal: no JSON serializer")
            return super().run(cmd, args, env)

    text = NoJson(SlurmConfig(backend="cli", conf=str(slurm_bed.conf_path), bin_dir=slurm_bed.bin_dir))
    again = runs(text)
    assert len(again) == 2 and [r for r in again if r[1] == "REQUEUED"] == [requeued], (again, got)
    assert any("-P" in argv for argv in text.calls)
