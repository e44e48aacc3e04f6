"""The test bed: a real Slurm cluster whose nodes are network namespaces (burstd/testbed, docs/testbed.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from burstd.providers.local import netns
from burstd.testbed import Bed, BedConfig, BedError

pytestmark = pytest.mark.bed


def _done(bed: Bed, job: int) -> str | None:
    state = bed.job(job).get("JobState", "")
    return state if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") else None


def _output(bed: Bed, job: int, user: str) -> str:
    return (bed.workdir(user) / f"out-{job}.txt").read_text()


def test_bed_is_up_with_onprem_nodes_and_hidden_free_cloud_nodes(slurm_bed):
    st = slurm_bed.status()
    assert st["up"] and st["slurmctld"]["pid"] and st["slurmrestd"]["pid"]
    for node in slurm_bed.onprem_nodes:
        assert st["nodes"][node]["state"] in ("idle", "mixed", "allocated")
        assert st["nodes"][node]["address"] == slurm_bed.config.node_address(node).split("/")[0]
        assert f"{slurm_bed.netns_prefix}{node}" in netns.list_netns()
    for node in slurm_bed.cloud_nodes:  # PrivateData=cloud: powered-down CLOUD nodes are listed
        assert slurm_bed.cloud_partition in st["nodes"][node]["partitions"]
        assert "CLOUD" in slurm_bed.node(node).get("State", "")
    assert str(slurm_bed.conf_path).startswith(str(slurm_bed.state_dir))


def test_onprem_job_runs_as_the_user_on_a_node_with_its_own_hostname(slurm_bed, bed_user):
    opts = ["-p", slurm_bed.onprem_partition, "-o", "out-%j.txt", "-N", "2", "--ntasks-per-node=1"]
    job = slurm_bed.sbatch(opts, "#!/bin/sh\nid -un\nsrun hostname | sort\n", user=bed_user)
    assert slurm_bed.wait_for(lambda: _done(slurm_bed, job), 60, f"job {job} to finish") == "COMPLETED"
    lines = _output(slurm_bed, job, bed_user).split()
    assert lines[0] == bed_user
    assert lines[1:] == sorted(slurm_bed.onprem_nodes[:2])


def test_slurmrestd_answers_with_a_jwt_and_refuses_without(slurm_bed):
    version = slurm_bed.rest_data_version  # v0.0.38 (no trailing slash there) / v0.0.42 / v0.0.45
    url = f"{slurm_bed.rest_url}/slurm/{version}/nodes" + ("" if version == "v0.0.38" else "/")
    auth = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": slurm_bed.jwt()}
    ok = httpx.get(url, headers=auth, timeout=10)
    assert ok.status_code == 200
    assert {n["name"] for n in ok.json()["nodes"]} >= set(slurm_bed.onprem_nodes)
    assert httpx.get(url, timeout=10).status_code == 401


def test_stub_hooks_log_the_hostlist_and_the_resume_file(slurm_bed, bed_user):
    node = slurm_bed.cloud_nodes[-1]
    # a test that ran earlier on this worker's bed may have left the node up, powering down or holding a
    # power-up: then Slurm runs the job there, or waits out the power-down, and calls no resume hook in time
    slurm_bed.reset_cloud_nodes(slurm_bed.config.resume_timeout + slurm_bed.config.suspend_timeout + 30)
    with slurm_bed.hooks("stub"):
        mark = slurm_bed.hooks_log.stat().st_size
        job = slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-w", node, "-o", "/dev/null"],
                               "#!/bin/sh\ntrue\n", user=bed_user)
        log = slurm_bed.wait_for(lambda: _new_log(slurm_bed, mark) if "SLURM_RESUME_FILE"
                                 in _new_log(slurm_bed, mark) else None, 60, "the stub resume hook")
        assert f" resume {node}\n" in log
        resume = json.loads(log.split("SLURM_RESUME_FILE ", 1)[1].splitlines()[0])
        # 22.05 names the nodes all_nodes; 23.02+ all_nodes_resume (tests/data/resume-files/)
        assert resume["jobs"][0]["job_id"] == job and resume.get("all_nodes", resume.get("all_nodes_resume")) == node
        slurm_bed.run(["scancel", str(job)])
        slurm_bed.run(["scontrol", "update", f"nodename={node}", "state=POWER_DOWN_FORCE", "reason=test"])
        slurm_bed.wait_for(lambda: f" suspend {node}" in _new_log(slurm_bed, mark), 30,
                           "the stub suspend hook")
        slurm_bed.wait_for(lambda: "POWERED_DOWN" in slurm_bed.node(node).get("State", ""), 40,
                           f"{node} powered down")
    assert not netns.netns_exists(slurm_bed.config.netns_of(node))  # a stub starts nothing


def _new_log(bed: Bed, offset: int) -> str:
    with open(bed.hooks_log) as fh:
        fh.seek(offset)
        return fh.read()


@pytest.mark.bed_hooks("bare")
def test_bare_hooks_burst_a_job_onto_a_namespace_vm_and_power_it_down_after(slurm_bed, bed_user):
    assert "node_up()" in (slurm_bed.state_dir / "hooks" / "resume").read_text()
    # a cloud node an earlier test left holding a power-up takes the job and runs no resume hook for it (Slurm
    # waits ResumeTimeout for a slurmd that never comes): start once no cloud node holds one
    slurm_bed.wait_for(lambda: not [n for n in slurm_bed.cloud_nodes
                                    if "POWERING_UP" in slurm_bed.node(n).get("State", "").split("+")],
                       slurm_bed.config.resume_timeout + 30, "no cloud node holding a power-up")
    job = slurm_bed.sbatch(["-p", slurm_bed.cloud_partition, "-o", "out-%j.txt"], "#!/bin/sh\nhostname\n",
                           user=bed_user)
    node = slurm_bed.wait_for(lambda: slurm_bed.job(job).get("NodeList", "(null)").replace("(null)", ""), 60,
                              f"job {job} to get a cloud node")
    assert node in slurm_bed.cloud_nodes
    ns = slurm_bed.config.netns_of(node)
    # Slurm runs the resume hook on its power-save thread, then the hook builds the VM: under CI's load both can
    # take well past 15 s; Slurm itself gives them ResumeTimeout
    slurm_bed.wait_for(lambda: netns.netns_exists(ns), slurm_bed.config.resume_timeout,
                       f"namespace {ns} from the resume hook")
    assert slurm_bed.wait_for(lambda: _done(slurm_bed, job), 90, f"job {job} to finish") == "COMPLETED"
    assert _output(slurm_bed, job, bed_user).strip() == node  # ran inside the VM: its own hostname
    # cloud_reg_addrs: the address comes from the slurmd's registration
    assert slurm_bed.node(node).get("NodeAddr") == slurm_bed.config.node_address(node).split("/")[0]
    # SuspendTime (10 s in tests) after the job, the suspend hook removes the VM and Slurm powers it down
    slurm_bed.wait_for(lambda: not netns.netns_exists(ns), 60, f"namespace {ns} removed by the suspend hook")
    slurm_bed.wait_for(lambda: "POWERED_DOWN" in slurm_bed.node(node).get("State", ""), 40,
                       f"{node} powered down")
    assert not netns.netns_pids(ns)
    assert netns.read_record(slurm_bed.vms_dir, ns) is None


def test_up_again_is_a_no_op_and_other_settings_are_refused(slurm_bed):
    pid = slurm_bed.ctld_pid()
    again = Bed(slurm_bed.config).up(install=False)
    assert again.ctld_pid() == pid
    assert slurm_bed.status()["up"]
    other = slurm_bed.config.model_copy(update={"cloud_count": slurm_bed.config.cloud_count + 1})
    with pytest.raises(BedError, match="already up with other settings"):
        Bed(other).up(install=False)


@pytest.mark.slow
def test_a_second_bed_runs_beside_the_first_and_goes_away_cleanly(slurm_bed, bed_user):
    first_pid = slurm_bed.ctld_pid()
    second = Bed(BedConfig(name="bedtwo", slot=slurm_bed.config.slot + 93, onprem_count=1, cloud_count=1))
    assert second.bridge != slurm_bed.bridge and second.ctld_port != slurm_bed.ctld_port
    try:
        second.up(install=False)
        job = second.sbatch(["-o", "out-%j.txt"], "#!/bin/sh\nhostname\n", user=bed_user)
        assert second.wait_for(lambda: _done(second, job), 60, f"bedtwo job {job}") == "COMPLETED"
        assert _output(second, job, bed_user).strip() == second.onprem_nodes[0]
        assert slurm_bed.ping() and slurm_bed.ctld_pid() == first_pid
        # a crash of the bed's daemons (no down): the next up starts from a clean slate
        stale = second.ctld_pid()
        os.kill(stale, signal.SIGKILL)
        os.kill(second.rest_pid(), signal.SIGKILL)
        second.wait_for(lambda: second.ctld_pid() is None, 10, "the killed slurmctld to be gone")
        second.up(install=False)
        assert second.ctld_pid() not in (None, stale) and second.job(job) == {}  # old jobs are gone
        # and their outputs: job ids start from 1 again, and a new job's out-%j.txt must not append to a dead one's
        assert not (second.workdir(bed_user) / f"out-{job}.txt").exists()
        assert second.node_states(second.onprem_partition) == {second.onprem_nodes[0]: "idle"}
    finally:
        second.down()
    assert not second.vm_namespaces() and not netns.link_exists(second.bridge)
    assert second.ctld_pid() is None and second.rest_pid() is None
    second.down()  # idempotent
    assert slurm_bed.ping() and slurm_bed.ctld_pid() == first_pid
    assert all(netns.netns_exists(slurm_bed.config.netns_of(n)) for n in slurm_bed.onprem_nodes)


def test_burstctl_testbed_status_json_says_up_or_down(slurm_bed):
    # the slot this worker's bed is in: under pytest -n, BURSTD_BED_SLOT names worker 0's (tests/bed.py)
    env = {**os.environ, "BURSTD_BED_SLOT": str(slurm_bed.config.slot)}

    def status(name):
        return subprocess.run([sys.executable, "-m", "burstd.cli.app", "testbed", "status", "--name", name,
                               "--json"], capture_output=True, text=True, timeout=60, env=env)

    up = status(slurm_bed.name)
    data = json.loads(up.stdout)
    assert up.returncode == 0 and data["up"] and data["slurmctld"]["port"] == slurm_bed.ctld_port
    assert set(data["nodes"]) == set(slurm_bed.onprem_nodes + slurm_bed.cloud_nodes)
    down = status("neverup")
    assert down.returncode == 3 and json.loads(down.stdout)["up"] is False
