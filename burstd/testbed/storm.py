"""A preemption storm on the bed (issue 22): the machinery ``burstctl demo --storm`` and the storm test share.

Template jobs (``sbatch_templates``: two single-node jobs and one data-parallel job on two nodes, the bed's four
cloud nodes) run ``burstd.train.example`` from the bed's job environment while burstd (already running with
``cfg_path``) bursts them. Half the cloud nodes are reclaimed with a notice (``burstctl preempt NODE --notice``),
then, once each of those jobs trains again half an interval past a periodic checkpoint, half without
(``--notice 0``: a power-off).
Every job must end with the weights of an uninterrupted run on the host (same seed and world size).

The lost node of the no-notice round is each job's batch node: a lost node that is not the batch node leaves the
batch script running, and it may finish before burstd requeues the job (docs/preemption-storm.md "Known race").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from burstd.testbed.storm_summary import JobRecord, Preemption, job_summary, runs_of

REPO = Path(__file__).resolve().parents[2]
SINGLE = REPO / "sbatch_templates" / "torchrun-single-node.sbatch"
MULTI = REPO / "sbatch_templates" / "torchrun-multi-node.sbatch"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))  # the host's, for the reference runs
STEPS = 150  # some 50 s of training a run on the bed: room for both rounds before a job ends
CKPT_EVERY = 10
STEP_SLEEP = 0.3
SEED = 5
NOTICE_S = 30
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def storm_daemon_settings(directory: Path) -> dict[str, dict]:
    """The daemon settings the storm runs under (over the bed's burstd.toml): a fresh database and state dir, a
    1 s agent poll, a short first wait, and budget enough for every restart."""
    return {
        "database": {"url": f"sqlite:///{directory}/burstd.db"},
        "daemon": {"state_dir": str(directory / "state"), "cycle_interval_s": 2, "orphan_grace_s": 10,
                   "launch_timeout_s": 60, "boot_timeout_s": 90, "log_format": "json"},
        "policy.waiting": {"kind": "constant", "min_wait_s": 3, "min_expected_wait_s": 0},
        "budget": {"default_account_usd": 100000},
        "agent": {"poll_interval_s": 1.0},
    }


def train_args(steps: int = STEPS) -> str:
    return (f"-m burstd.train.example --steps {steps} --seed {SEED} --ckpt-every {CKPT_EVERY} "
            f"--step-sleep {STEP_SLEEP}")


def gated_torchrun(d: Path, torchrun: str) -> tuple[Path, Path]:
    """A torchrun whose first run waits for the gate file ``gate-0``: the jobs start on their nodes up to 30 s
    apart (Slurm's tick), so the gate opens once they all run and they train at once. Later runs (after a
    preemption) start at once: their time back to training is what the storm measures."""
    gate, wrapper = d / "gate", d / "torchrun-gated"
    wrapper.write_text(f"#!/bin/sh\nif [ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ]; then\n"
                       f"  while [ ! -e {gate}-0 ]; do sleep 0.2; done\nfi\nexec {torchrun} \"$@\"\n")
    wrapper.chmod(0o755)
    return gate, wrapper


def submit_template(bed, template: Path, partition: str, d: Path, name: str, *, nodes: int = 1,
                    nproc: int = 2, extra: tuple[str, ...] = (), torchrun: str | None = None,
                    train: str | None = None, user: str | None = None) -> tuple[int, Path, Path]:
    """Submit a template job that runs the bed's job environment (the interpreter and torchrun a site installs
    for its job users), as root unless ``user``; returns (job id, checkpoint folder, log)."""
    env = bed.job_env()
    ckpt, log = d / f"{name}-ckpt", d / f"{name}.log"
    ckpt.mkdir()
    if user:
        shutil.chown(ckpt, user, user)
    exports = {"CKPT_DIR": str(ckpt), "NPROC": str(nproc), "PYTHON": str(env.python),
               "TORCHRUN": torchrun or str(env.torchrun), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
               "TRAIN_ARGS": train or train_args()}
    if nodes > 1:
        exports["GLOO_SOCKET_IFNAME"] = "eth0"
    export = "ALL," + ",".join(f"{k}={v}" for k, v in exports.items())
    # --cpus-per-task from the template (2: one a process, the whole of a bed cloud node) unless overridden
    opts = ["-p", partition, "-N", str(nodes), "--time=20", f"--job-name={name}", f"--output={log}",
            f"--export={export}", *extra]
    return bed.sbatch(opts, template.read_text(), user=user), ckpt, log


def job_state(bed, job: int) -> str:
    return bed.job(job).get("JobState", "")


def restarts(bed, job: int) -> int:
    return int(bed.job(job).get("Restarts", "0") or 0)


def nodes_of(bed, job: int) -> list[str]:
    nodelist = bed.job(job).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        return []
    return bed.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def log_text(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def steps_by_run(log: Path) -> list[list[int]]:
    return [[s.number for s in run] for run in runs_of(log_text(log))]


def last_step(log: Path) -> int:
    runs = steps_by_run(log)
    return max(runs[-1]) if runs and runs[-1] else 0


def preempt(cfg_path: Path, node: str, notice: float) -> str:
    """``burstctl preempt``; returns what it printed."""
    return subprocess.run([sys.executable, "-m", "burstd.cli.app", "preempt", node, "--notice", str(notice),
                           "-c", str(cfg_path)], capture_output=True, text=True, check=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO))).stdout


def complete_checkpoints(ckpt: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in ckpt.glob("step-*")
                  if re.fullmatch(r"step-\d{9}", p.name) and (p / "burstd-checkpoint.json").exists())


def same_weights(a: Path, b: Path) -> bool:
    import torch

    if not (a.exists() and b.exists()):
        return False
    sa, sb = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    return sa["model"].keys() == sb["model"].keys() and all(
        torch.equal(sa["model"][k], sb["model"][k]) for k in sa["model"])


def reference(d: Path, name: str, nproc: int, steps: int = STEPS) -> tuple[subprocess.Popen, Path]:
    """An uninterrupted run of the same training on the host (no sleep between steps: the sleep changes no
    weight), ``nproc`` ranks: the world size of the cloud job it stands for."""
    out = d / f"{name}.pt"
    port = 29000 + nproc + os.getpid() % 500
    proc = subprocess.Popen(
        [TORCHRUN, "--nnodes=1", "--node-rank=0", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
         f"--master-port={port}", *f"-m burstd.train.example --steps {steps} --seed {SEED}".split(),
         "--ckpt-dir", str(d / f"{name}-ckpt"), "--out", str(out)],
        env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo"),
        stdout=(d / f"{name}.log").open("w"), stderr=subprocess.STDOUT, cwd=REPO)
    return proc, out


@dataclass
class StormJob:
    record: JobRecord
    ckpt: Path
    log: Path


@dataclass
class StormRun:
    jobs: dict[str, StormJob]
    summary: dict
    notice_reasons: dict[str, str] = field(default_factory=dict)  # node -> the reason its agent drained it with


def _mid_interval(job: StormJob, runs_before: int) -> bool:
    """The job runs again (a run after the ``runs_before`` it had), has saved a periodic checkpoint in it and
    trained half an interval past it: a power-off then lands mid-interval, where a single node loses steps."""
    runs = steps_by_run(job.log)
    if len(runs) <= runs_before or not runs[-1]:
        return False
    saved = max(complete_checkpoints(job.ckpt), default=0)
    return saved >= min(runs[-1]) and max(runs[-1]) >= saved + CKPT_EVERY // 2


def _preempt_reason(bed, node: str) -> str:
    """The node's reason when burstd-agent's notice drain set it ("" until then): one scontrol a look."""
    reason = bed.node(node).get("Reason", "")
    return reason if "burstd-preempt" in reason else ""


def run_storm(bed, cfg_path: Path, d: Path, leaked_vms, *, notice_s: float = NOTICE_S, steps: int = STEPS,
              say=lambda text: None) -> StormRun:
    """Run the storm with the daemon of ``cfg_path`` running; ``leaked_vms()`` counts the VMs left once it is
    over. Returns the jobs and the summary (:mod:`burstd.testbed.storm_summary`); raises AssertionError (from
    ``bed.wait_for``) when a phase never comes."""
    os.chmod(d, 0o755)
    refs = {2: reference(d, "ref-w2", 2, steps), 4: reference(d, "ref-w4", 4, steps)}
    gate, torchrun = gated_torchrun(d, str(bed.job_env().torchrun))
    jobs: dict[str, StormJob] = {}
    try:
        for name, tpl, n in (("s1", SINGLE, 1), ("s2", SINGLE, 1), ("m", MULTI, 2)):
            job_id, ckpt, log = submit_template(bed, tpl, bed.cloud_partition, d, name, nodes=n,
                                                torchrun=str(torchrun), train=train_args(steps))
            jobs[name] = StormJob(JobRecord(name, job_id, n, 2 * n, CKPT_EVERY), ckpt, log)
        ids = [j.record.job_id for j in jobs.values()]
        say(f"submitted {len(ids)} template jobs (s1, s2: one node; m: two nodes)")
        bed.wait_for(lambda: all(job_state(bed, j) == "RUNNING" for j in ids), 300, "every job to run on cloud nodes")
        Path(f"{gate}-0").touch()
        bed.wait_for(lambda: all(last_step(j.log) >= 12 for j in jobs.values()), 300,
                     "every job to train on the cloud nodes")
        # round 1, with notice: s1's node and one of m's (its second: the batch node stays), half of the 4 nodes
        hit = (jobs["s1"], jobs["m"])
        victims = [nodes_of(bed, jobs["s1"].record.job_id)[0], nodes_of(bed, jobs["m"].record.job_id)[-1]]
        with ThreadPoolExecutor(len(victims)) as pool:  # at once: one burstctl run takes seconds on a busy head
            for job in hit:
                job.record.preemptions.append(Preemption(True, time.time()))
            list(pool.map(lambda node: preempt(cfg_path, node, notice_s), victims))
        for job, node in zip(hit, victims):
            say(f"{node} ({job.record.name}): reclaimed with {notice_s:g} s notice")
        # the node's agent drains it at once, its reason naming the deadline (while the job checkpoints)
        reasons = {node: bed.wait_for(lambda node=node: _preempt_reason(bed, node), 30, f"the agent to drain {node}")
                   for node in victims}
        for job in hit:
            bed.wait_for(lambda job=job: restarts(bed, job.record.job_id) >= 1, notice_s + 60,
                         f"{job.record.name} to be requeued")
        # round 2, without notice (a power-off of the batch node): each job once it trains again half an interval
        # past a periodic checkpoint of this run
        pending = list(hit)
        deadline = time.monotonic() + 300
        while pending:
            for job in [j for j in pending if _mid_interval(j, 1)]:
                node = nodes_of(bed, job.record.job_id)[0]
                job.record.preemptions.append(Preemption(False, time.time()))
                said = " ".join(preempt(cfg_path, node, 0).split())
                assert "powered off without notice" in said and "notice given" not in said, said
                say(f"{node} ({job.record.name}): powered off without notice")
                pending.remove(job)
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {[j.record.name for j in pending]} to train again "
                                     "half an interval past a periodic checkpoint")
            time.sleep(0.5)
        bed.wait_for(lambda: all(job_state(bed, j) in ENDED for j in ids), 600, "every job to end")
        say("every job ended; waiting for the cloud nodes to power down")
        for proc, _ in refs.values():
            proc.wait(300)
        # a VM still up once every node is powered down again is a leak (SuspendTime idle powers them down)
        bed.wait_for(lambda: all("POWERED_DOWN" in bed.node(n).get("State", "") for n in bed.cloud_nodes), 240,
                     "every cloud node to be powered down again")
        per_job = {name: job_summary(j.record, log_text(j.log),
                                     same_weights(j.ckpt / "final.pt", refs[j.record.ranks][1]))
                   for name, j in jobs.items()}
        summary = {
            "jobs_submitted": len(ids),
            "jobs_completed": sum(job_state(bed, j) == "COMPLETED" for j in ids),
            "leaked_vms": leaked_vms(),
            "notice_s": notice_s,
            "jobs": per_job,
        }
        return StormRun(jobs, summary, reasons)
    finally:
        for j in jobs.values():
            bed.run(["scancel", str(j.record.job_id)], check=False)
        for proc, _ in refs.values():
            if proc.poll() is None:
                proc.kill()
