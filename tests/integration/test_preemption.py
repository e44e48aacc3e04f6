"""Surviving spot preemption, end to end on the bed.

The story: a 2-node torchrun job (CPU, gloo, 2 processes a node, the multi-node sbatch template) is sent to
the cloud partition; burstd launches two local VMs for it, each with its metadata endpoint and burstd-agent.
Mid-training, a preemption notice is injected on one node through its metadata endpoint (`burstctl preempt`);
the agent drains the node and signals the workers; every rank checkpoints before the deadline; the job is
requeued, resumes on other nodes from that checkpoint, and finishes with weights bit-identical to an
uninterrupted run of the same script and seed (run at the same time on the on-prem nodes), having lost at most
one step. The second test reclaims a node with no notice at all: the job resumes from its last periodic
checkpoint, and still ends bit-identical.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.bed, pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "sbatch_templates" / "torchrun-multi-node.sbatch"
for _needed in (
    REPO / "tests" / "bed.py",
    TEMPLATE,
    REPO / "burstd" / "daemon" / "main.py",
    REPO / "burstd" / "train" / "example.py",
    REPO / "burstd" / "providers" / "local" / "provider.py",
):
    if not _needed.exists():
        pytest.skip(f"needs {_needed.relative_to(REPO)} (bed, daemon, train)", allow_module_level=True)
STEPS = 150
CKPT_EVERY = 10
STEP_SLEEP = 0.5
NOTICE_S = 40
SEED = 11


# --------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def burst_cluster(slurm_bed):
    """The bed, its hooks in burstd mode, and a burstd daemon (local provider: agents in the VMs) running."""
    from burstd.config import load_config
    from tests.integration.daemon_bed import bed_daemon_config, running_daemon, world_readable_dir

    d = world_readable_dir("burstd-preempt-")
    cfg_path = bed_daemon_config(
        slurm_bed, d, agent={"poll_interval_s": 1.0}, budget={"default_account_usd": 100000}
    )
    cfg = load_config(cfg_path)
    with running_daemon(slurm_bed, cfg_path, d / "burstd.log"):
        yield slurm_bed, cfg_path, cfg, d
        # nothing may outlive the story: idle cloud nodes power down and burstd terminates their VMs
        slurm_bed.wait_for(lambda: not _cloud_vms(slurm_bed), 300, "every cloud VM to be torn down by burstd")
    shutil.rmtree(d, ignore_errors=True)


def _cloud_vms(bed) -> list[str]:
    cloud = {f"{bed.netns_prefix}{c}" for c in bed.cloud_nodes}
    return sorted(n for n in bed.vm_namespaces() if n in cloud)


# --------------------------------------------------------------------------------------------- helpers


def _submit(bed, partition: str, ckpt: Path, log: Path, name: str) -> int:
    env = bed.job_env()  # the interpreter and torchrun a site installs for its jobs (docs/researchers.md)
    exports = {
        "CKPT_DIR": str(ckpt),
        "NPROC": "2",
        "PYTHON": str(env.python),
        "TORCHRUN": str(env.torchrun),
        "PYTHONPATH": str(REPO),
        "GLOO_SOCKET_IFNAME": "eth0",
        "OMP_NUM_THREADS": "1",
        "TRAIN_ARGS": f"-m burstd.train.example --steps {STEPS} --seed {SEED} --ckpt-every {CKPT_EVERY} "
        f"--step-sleep {STEP_SLEEP}",
    }
    export = "ALL," + ",".join(f"{k}={v}" for k, v in exports.items())
    opts = [
        "-p",
        partition,
        "-N",
        "2",
        "--cpus-per-task=2",
        "--time=20",
        f"--job-name={name}",
        f"--output={log}",
        f"--export={export}",
    ]
    return bed.sbatch(opts, TEMPLATE.read_text())


def _steps_by_run(log: Path) -> list[list[int]]:
    """Steps printed by rank 0, per run of the job (the template prints a header line at each run)."""
    runs: list[list[int]] = []
    for line in log.read_text(errors="replace").splitlines():
        if re.search(r"job \d+ run \d+ on ", line):
            runs.append([])
        m = re.search(r"rank=0 step=(\d+) ", line)
        if m and runs:
            runs[-1].append(int(m.group(1)))
    return runs


def _complete_checkpoints(ckpt: Path) -> dict[int, float]:
    """step -> mtime of its manifest (the file written last: the checkpoint is durable from then on)."""
    out = {}
    for d in ckpt.glob("step-*"):
        m = re.fullmatch(r"step-(\d{9})", d.name)
        manifest = d / "burstd-checkpoint.json"
        if m and manifest.exists():
            out[int(m.group(1))] = manifest.stat().st_mtime
    return out


def _assert_same_weights(a: Path, b: Path) -> None:
    sa, sb = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    assert sa["model"].keys() == sb["model"].keys()
    for k in sa["model"]:
        assert torch.equal(sa["model"][k], sb["model"][k]), f"weights differ in {k}"
    for pa, pb in zip(sa["optimizer"]["state"].values(), sb["optimizer"]["state"].values(), strict=True):
        for k in pa:
            assert torch.equal(torch.as_tensor(pa[k]), torch.as_tensor(pb[k])), (
                f"optimizer state differs in {k}"
            )


def _job_done(bed, job: int) -> str | None:
    state = bed.job(job).get("JobState", "")
    return (
        state
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
        else None
    )


def _nodes(bed, job: int) -> list[str]:
    nodelist = bed.job(job).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        return []
    return bed.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def _instance_of(cfg, node: str) -> str | None:
    """The live VM (instance id) behind a cloud node right now."""
    from burstd.providers.local.provider import LocalProvider

    pool = cfg.pool_of_node(node)
    live = [
        i
        for i in LocalProvider.from_config(cfg, pool.name).list_instances()
        if i.node_name == node and not i.is_gone
    ]
    return live[0].instance_id if live else None


def _run_reference(bed, d: Path) -> tuple[int, Path, Path]:
    ckpt, log = d / "ref-ckpt", d / "ref.log"
    ckpt.mkdir()
    return _submit(bed, bed.onprem_partition, ckpt, log, "ref"), ckpt, log


def _cleanup(bed, *jobs: int) -> None:
    for j in jobs:
        bed.run(["scancel", str(j)], check=False)


# --------------------------------------------------------------------------------------------- the tests


def test_notice_checkpoints_requeues_and_resumes_bit_identical(burst_cluster):
    bed, cfg_path, cfg, d = burst_cluster
    d = d / "notice"
    d.mkdir()
    ref, ref_ckpt, ref_log = _run_reference(bed, d)
    ckpt, log = d / "ckpt", d / "job.log"
    ckpt.mkdir()
    job = _submit(bed, bed.cloud_partition, ckpt, log, "preempted")
    try:
        bed.wait_for(
            lambda: bed.job(job).get("JobState") == "RUNNING", 240, "the job to run on two cloud nodes"
        )
        first_nodes = _nodes(bed, job)
        assert len(first_nodes) == 2 and all(n in bed.cloud_nodes for n in first_nodes), first_nodes
        bed.wait_for(
            lambda: (
                log.exists()
                and (_steps_by_run(log) or [[]])[-1]
                and max(_steps_by_run(log)[-1]) >= 2 * CKPT_EVERY + 3
            ),
            240,
            "training to be well under way",
        )
        victim = first_nodes[-1]
        victim_instance = _instance_of(cfg, victim)

        # the notice, through the victim VM's metadata endpoint; its time is taken when the command starts (the
        # CLI may need seconds to exit on a loaded machine, while the job saves at once)
        notice_at = time.time()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "burstd.cli.app",
                "preempt",
                victim,
                "--notice",
                str(NOTICE_S),
                "--json",
                "-c",
                str(cfg_path),
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            cwd=REPO,
            check=True,
        )
        deadline = json.loads(out.stdout)["deadline_unix"]

        # the agent drains the node with the deadline in the reason
        reason = bed.wait_for(
            lambda: "burstd-preempt" in bed.node(victim).get("Reason", "") and bed.node(victim)["Reason"],
            30,
            "the agent to drain the victim",
        )
        assert "terminate at" in reason

        # every rank checkpoints before the deadline; the job is requeued
        bed.wait_for(
            lambda: int(bed.job(job).get("Restarts", "0")) >= 1, NOTICE_S + 60, "the job to be requeued"
        )
        ckpts = _complete_checkpoints(ckpt)
        runs = _steps_by_run(log)
        last_step_run1 = max(runs[0])
        stop_step = max(ckpts)
        assert notice_at - 1 <= ckpts[stop_step] < deadline, "checkpoint not durable before the deadline"
        assert last_step_run1 - stop_step <= 1, f"lost {last_step_run1 - stop_step} steps"

        # the requeued job resumes elsewhere (fresh VMs: the preempted one is gone) from that checkpoint
        bed.wait_for(
            lambda: len(_steps_by_run(log)) >= 2 and _steps_by_run(log)[1], 300, "the second run to train"
        )
        second = {n: _instance_of(cfg, n) for n in _nodes(bed, job)}
        assert victim_instance not in second.values(), (
            f"run 2 on the preempted VM {victim_instance}: {second}"
        )
        state = bed.wait_for(lambda: _job_done(bed, job), 600, "the requeued job to finish")
        assert state == "COMPLETED", log.read_text()[-4000:]
        runs = _steps_by_run(log)
        assert len(runs) >= 2 and min(runs[1]) == stop_step + 1, f"run 2 did not resume at {stop_step + 1}"
        assert max(runs[-1]) == STEPS

        bed.wait_for(lambda: _job_done(bed, ref), 600, "the reference job to finish")
        assert _job_done(bed, ref) == "COMPLETED", ref_log.read_text()[-4000:]
        _assert_same_weights(ckpt / "final.pt", ref_ckpt / "final.pt")
    finally:
        _cleanup(bed, job, ref)


def test_node_killed_without_notice_resumes_from_the_survivors_save_or_the_last_periodic_checkpoint(burst_cluster):
    bed, _cfg_path, cfg, d = burst_cluster
    from burstd.providers.local.provider import LocalProvider

    d = d / "kill"
    d.mkdir()
    ref, ref_ckpt, _ref_log = _run_reference(bed, d)
    ckpt, log = d / "ckpt", d / "job.log"
    ckpt.mkdir()
    job = _submit(bed, bed.cloud_partition, ckpt, log, "killed")
    try:
        bed.wait_for(
            lambda: bed.job(job).get("JobState") == "RUNNING", 240, "the job to run on two cloud nodes"
        )
        first_nodes = _nodes(bed, job)
        bed.wait_for(lambda: 2 * CKPT_EVERY in _complete_checkpoints(ckpt), 240, "two periodic checkpoints")
        bed.wait_for(
            lambda: max(_steps_by_run(log)[-1]) >= 2 * CKPT_EVERY + 4, 60, "steps past the checkpoint"
        )
        victim = first_nodes[-1]
        provider = LocalProvider.from_config(cfg, cfg.pool_of_node(victim).name)
        instance = _instance_of(cfg, victim)
        # a hard crash: SIGKILL to everything in the VM first (destroying it alone would send SIGTERM, which
        # burstd.train already turns into a checkpoint), then the VM is gone
        pids = subprocess.run(
            ["ip", "netns", "pids", provider.netns_of(victim)], check=False, capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert provider.preempt(instance)
        killed_at_step = max(_steps_by_run(log)[0])
        periodic = max(s for s in _complete_checkpoints(ckpt) if s <= killed_at_step and s % CKPT_EVERY == 0)

        state = bed.wait_for(lambda: _job_done(bed, job), 900, "the job to be requeued and finish")
        assert state == "COMPLETED", log.read_text()[-4000:]
        assert int(bed.job(job).get("Restarts", "0")) >= 1
        runs = _steps_by_run(log)
        resumed_from = min(next(r for r in runs[1:] if r)) - 1  # the first run after the kill
        # the surviving node saves just in time (burstd.train's survivor path: at most the step in flight redone,
        # and rank 0's log may be a step behind the survivors); when Slurm ends the survivors before their
        # collective times out, the job falls back to the last periodic checkpoint
        assert resumed_from == periodic or killed_at_step - 1 <= resumed_from <= killed_at_step + 1, (
            f"resumed after step {resumed_from}: neither the last periodic checkpoint {periodic} nor a "
            f"just-in-time save at the kill (step {killed_at_step})"
        )
        assert max(runs[-1]) == STEPS
        bed.wait_for(lambda: _job_done(bed, ref), 600, "the reference job to finish")
        _assert_same_weights(ckpt / "final.pt", ref_ckpt / "final.pt")
    finally:
        _cleanup(bed, job, ref)
