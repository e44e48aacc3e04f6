"""The preemption path on the bed, every case that must come out right, in one daemon session.

1. A cancelled job never comes back, the jobs running on a reclaimed node do: job A (the single-node
   template, on a cloud node with no DNS for its own hostname) trains on cloud node N and is cancelled with
   `scancel` (SIGTERM): it checkpoints and stays CANCELLED. Job B, a plain `sleep` that never asked for the
   preemption signal, runs on N too. N is reclaimed with notice: the agent leaves B alone, burstd requeues
   B (and only B) when the VM goes; B completes, A is still CANCELLED with no restart.
2. `scancel` of a multi-node template job on cloud nodes ends it for good, as for the single-node one.
3. The job user (not root) runs the project's Python on a cloud node from the bed's job environment
   (``Bed.job_env()``: the project venv here is built from a private interpreter under /root), as a site must
   provide it (docs/researchers.md "What the site must provide").
4. The documented way to ask a single-node template job for a checkpoint and a requeue: `scancel --batch
   --signal=USR1` (a plain `scancel --signal=USR1` signals only job steps, and that template has none).
5. A storm: template jobs (single- and multi-node) on every cloud node; half of the nodes reclaimed at once
   with notice, then half without (a power-off: SIGKILL to the whole VM). Every job completes bit-identical
   to an uninterrupted run; the steps each job lost are measured from its log and printed as a table. The
   two-node job redoes at most one step without notice: its surviving ranks save just in time. Once
   the nodes are back to idle~, burstd has cleared the reasons it left on them.

The jobs run the templates with the bed's job environment (``PYTHON``/``TORCHRUN``), as a site's would.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.bed, pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SINGLE = REPO / "sbatch_templates" / "torchrun-single-node.sbatch"
MULTI = REPO / "sbatch_templates" / "torchrun-multi-node.sbatch"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))  # the host's, for the reference runs
JOB_USER = "burstuser"
STEPS = 70
CKPT_EVERY = 10
STEP_SLEEP = 0.3
SEED = 5
NOTICE_S = 15
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="module")
def burst_cluster(slurm_bed):
    from burstd.config import load_config
    from tests.integration.daemon_bed import bed_daemon_config, running_daemon, world_readable_dir

    d = world_readable_dir("burstd-storm-")
    cfg_path = bed_daemon_config(slurm_bed, d, agent={"poll_interval_s": 1.0},
                                 budget={"default_account_usd": 100000})
    slurm_bed.job_env()  # built once, before any job needs it
    with running_daemon(slurm_bed, cfg_path, d / "burstd.log"):
        yield slurm_bed, cfg_path, load_config(cfg_path), d
    shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------------------------- helpers


def _train_args(steps: int = STEPS) -> str:
    return (f"-m burstd.train.example --steps {steps} --seed {SEED} --ckpt-every {CKPT_EVERY} "
            f"--step-sleep {STEP_SLEEP}")


def _gated_torchrun(d: Path, torchrun: str) -> tuple[Path, Path]:
    """A torchrun that waits for a gate file of its run (``gate-<SLURM_RESTART_COUNT>``) before it starts: the
    jobs start on their nodes up to 30 s apart (Slurm's tick), so each round opens the gate once they all run,
    they train at once, and the test needs no long step counts to overlap them."""
    gate, wrapper = d / "gate", d / "torchrun-gated"
    wrapper.write_text(f"#!/bin/sh\nwhile [ ! -e {gate}-${{SLURM_RESTART_COUNT:-0}} ]; do sleep 0.2; done\n"
                       f"exec {torchrun} \"$@\"\n")
    wrapper.chmod(0o755)
    return gate, wrapper


def _submit_template(bed, template: Path, partition: str, d: Path, name: str, *, nodes: int = 1,
                     nproc: int = 2, extra: tuple[str, ...] = (), torchrun: str | None = None,
                     train_args: str | None = None, user: str | None = None) -> tuple[int, Path, Path]:
    """Submit a template job that runs the bed's job environment (the interpreter and torchrun a site installs
    for its job users), as root unless ``user``."""
    env = bed.job_env()
    ckpt, log = d / f"{name}-ckpt", d / f"{name}.log"
    ckpt.mkdir()
    if user:
        shutil.chown(ckpt, user, user)
    exports = {"CKPT_DIR": str(ckpt), "NPROC": str(nproc), "PYTHON": str(env.python),
               "TORCHRUN": torchrun or str(env.torchrun), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
               "TRAIN_ARGS": train_args or _train_args()}
    if nodes > 1:
        exports["GLOO_SOCKET_IFNAME"] = "eth0"
    export = "ALL," + ",".join(f"{k}={v}" for k, v in exports.items())
    # --cpus-per-task from the template (2: one a process, the whole of a bed cloud node) unless overridden
    opts = ["-p", partition, "-N", str(nodes), "--time=20", f"--job-name={name}", f"--output={log}",
            f"--export={export}", *extra]
    return bed.sbatch(opts, template.read_text(), user=user), ckpt, log


def _state(bed, job: int) -> str:
    return bed.job(job).get("JobState", "")


def _restarts(bed, job: int) -> int:
    return int(bed.job(job).get("Restarts", "0") or 0)


def _nodes(bed, job: int) -> list[str]:
    nodelist = bed.job(job).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        return []
    return bed.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def _steps_by_run(log: Path) -> list[list[int]]:
    runs: list[list[int]] = []
    if not log.exists():
        return runs
    for line in log.read_text(errors="replace").splitlines():
        if re.search(r"job \d+ run \d+ on ", line):
            runs.append([])
        m = re.search(r"rank=0 step=(\d+) ", line)
        if m and runs:
            runs[-1].append(int(m.group(1)))
    return runs


def _last_step(log: Path) -> int:
    runs = _steps_by_run(log)
    return max(runs[-1]) if runs and runs[-1] else 0


def _preempt(cfg_path: Path, node: str, notice: float) -> str:
    """``burstctl preempt``; returns what it printed."""
    return subprocess.run([sys.executable, "-m", "burstd.cli.app", "preempt", node, "--notice", str(notice),
                           "-c", str(cfg_path)], capture_output=True, text=True, check=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO))).stdout


def _complete_checkpoints(ckpt: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in ckpt.glob("step-*")
                  if re.fullmatch(r"step-\d{9}", p.name) and (p / "burstd-checkpoint.json").exists())


def _same_weights(a: Path, b: Path) -> bool:
    sa, sb = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    return sa["model"].keys() == sb["model"].keys() and all(
        torch.equal(sa["model"][k], sb["model"][k]) for k in sa["model"])


def _lost_steps(log: Path) -> list[int]:
    """Steps redone per interruption: the last step a run printed minus the step the next run resumed after."""
    runs = [r for r in _steps_by_run(log) if r]
    return [max(prev) - (min(nxt) - 1) for prev, nxt in itertools.pairwise(runs)]


# --------------------------------------------------------------------------------------------- the tests


def test_cancelled_job_stays_cancelled_and_the_plain_job_running_there_is_requeued_on_reclaim(burst_cluster):
    bed, cfg_path, _cfg, d = burst_cluster
    d = d / "cancel"
    d.mkdir()
    job_a, ckpt_a, log_a = _submit_template(bed, SINGLE, bed.cloud_partition, d, "a", nproc=1,
                                            extra=("--cpus-per-task=1",))
    job_b = None
    try:
        bed.wait_for(lambda: _state(bed, job_a) == "RUNNING", 240, "job A to run on a cloud node")
        node = _nodes(bed, job_a)[0]
        # the single-node template trains on a cloud node whose hostname no DNS resolves
        bed.wait_for(lambda: _last_step(log_a) >= 3, 120, "job A to train on the DNS-less cloud node")
        flag = d / "b.ran"
        job_b = bed.sbatch(["-p", bed.cloud_partition, "-w", node, "-n1", "--cpus-per-task=1", "--requeue",
                            "--time=10", f"--output={d / 'b.log'}"],
                           "#!/bin/bash\necho \"run ${SLURM_RESTART_COUNT:-0}\" >> " + str(flag) + "\n"
                           "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then sleep 600; fi\n")
        bed.wait_for(lambda: _state(bed, job_b) == "RUNNING", 120, "job B (plain sleep) to run beside A")
        assert _nodes(bed, job_b) == [node]

        bed.run(["scancel", str(job_a)])  # SIGTERM: a cancel, not a preemption
        bed.wait_for(lambda: _state(bed, job_a) in ENDED, 60, "job A to end")
        text = bed.wait_for(lambda: "cancelled: not requeueing" in log_a.read_text() and log_a.read_text(), 30,
                            "job A's script to see the cancel")
        assert "requeued (job" not in text
        assert _complete_checkpoints(ckpt_a), "the cancelled training still saves its checkpoint"

        _preempt(cfg_path, node, NOTICE_S)
        bed.wait_for(lambda: _restarts(bed, job_b) >= 1, NOTICE_S + 90, "burstd to requeue job B")
        bed.wait_for(lambda: _state(bed, job_b) == "COMPLETED", 240, "job B to run again and complete")
        assert flag.read_text().split("\n")[:2] == ["run 0", "run 1"]
        assert _state(bed, job_a) == "CANCELLED" and _restarts(bed, job_a) == 0
        assert len(_steps_by_run(log_a)) == 1, "the cancelled job ran again"
    finally:
        for j in (job_a, job_b):
            if j:
                bed.run(["scancel", str(j)], check=False)


def test_scancel_of_a_multi_node_template_job_on_cloud_nodes_ends_it_for_good(burst_cluster):
    bed, _cfg_path, _cfg, d = burst_cluster
    d = d / "cancel-multi"
    d.mkdir()
    job, ckpt, log = _submit_template(bed, MULTI, bed.cloud_partition, d, "mc", nodes=2, nproc=1,
                                      extra=("--cpus-per-task=1",))
    try:
        bed.wait_for(lambda: _state(bed, job) == "RUNNING", 240, "the 2-node job to run on cloud nodes")
        nodes = _nodes(bed, job)
        assert len(nodes) == 2 and set(nodes) <= set(bed.cloud_nodes), nodes
        bed.wait_for(lambda: _last_step(log) >= 3, 180, "the 2-node job to train on the cloud nodes")

        bed.run(["scancel", str(job)])  # SIGTERM to the steps and the batch shell: a cancel
        bed.wait_for(lambda: _state(bed, job) in ENDED, 90, "the job to end")
        text = bed.wait_for(lambda: "cancelled: not requeueing" in log.read_text() and log.read_text(), 30,
                            "the script to see the cancel")
        assert "requeued (job" not in text
        assert _complete_checkpoints(ckpt), "the cancelled training still saves its checkpoint"
        # past the requeue delay (cred_expire + 1 s) it is still cancelled, and never ran again
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert _state(bed, job) == "CANCELLED" and _restarts(bed, job) == 0, bed.job(job)
            time.sleep(1)
        assert len(_steps_by_run(log)) == 1, "the cancelled job ran again"
    finally:
        bed.run(["scancel", str(job)], check=False)


def test_the_job_user_trains_on_a_cloud_node_with_the_beds_job_environment(burst_cluster):
    """burstuser's sbatch job (single-node template) runs torchrun and burstd.train from ``Bed.job_env()``; the
    project's own venv (built from a private interpreter under /root here) would fail with exit 126."""
    bed, _cfg_path, _cfg, _d = burst_cluster
    env = bed.job_env()
    d = bed.workdir(JOB_USER) / f"jobenv-{os.getpid()}"
    d.mkdir()
    shutil.chown(d, JOB_USER, JOB_USER)
    probe = bed.run([str(env.python), "-c", "import torch, burstd.train; print('ok')"], user=JOB_USER, check=False)
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe
    job, ckpt, log = _submit_template(bed, SINGLE, bed.cloud_partition, d, "user", nproc=1,
                                      extra=("--cpus-per-task=1",), user=JOB_USER,
                                      train_args=f"-m burstd.train.example --steps 3 --seed {SEED} --ckpt-every 2")
    try:
        state = bed.wait_for(lambda: _state(bed, job) in ENDED and _state(bed, job), 300, "the user's job to end")
        text = log.read_text(errors="replace")
        assert state == "COMPLETED", text[-3000:]
        assert bed.job(job).get("UserId", "").startswith(f"{JOB_USER}("), bed.job(job)
        assert _nodes(bed, job) == [] or set(_nodes(bed, job)) <= set(bed.cloud_nodes)
        assert re.search(r"job \d+ run 1 on cloud\d+,", text), text[-2000:]
        assert _steps_by_run(log) == [[1, 2, 3]] and "training finished" in text
        final = ckpt / "final.pt"
        assert final.exists() and final.owner() == JOB_USER
        assert _complete_checkpoints(ckpt) == [2], "the periodic checkpoint, written as the job user"
    finally:
        bed.run(["scancel", str(job)], check=False)


def test_scancel_batch_usr1_checkpoints_and_requeues_a_single_node_template_job(burst_cluster):
    """What docs/researchers.md says: `scancel --batch --signal=USR1 JOBID` (to the batch shell, whose trap passes it
    to torchrun) checkpoints and requeues the single-node template's job; a plain `scancel --signal=USR1 JOBID`
    signals only job steps, and this job has none, so nothing happens."""
    bed, _cfg_path, _cfg, d = burst_cluster
    d = d / "usr1"
    d.mkdir()
    job, ckpt, log = _submit_template(bed, SINGLE, bed.onprem_partition, d, "usr1", nproc=1,
                                      extra=("--cpus-per-task=1",))
    try:
        bed.wait_for(lambda: _last_step(log) >= CKPT_EVERY + 2, 180, "the job to train past a checkpoint")
        bed.run(["scancel", "--signal=USR1", str(job)])
        time.sleep(5)
        assert _state(bed, job) == "RUNNING" and _restarts(bed, job) == 0
        assert "got USR1" not in log.read_text(), "a plain scancel --signal reached the batch shell"

        bed.run(["scancel", "--batch", "--signal=USR1", str(job)])
        bed.wait_for(lambda: _restarts(bed, job) >= 1, 60, "the job to checkpoint and requeue itself")
        text = log.read_text(errors="replace")
        assert "got USR1 (preemption)" in text and "checkpoint saved, requeued (job" in text
        stop = max(_complete_checkpoints(ckpt))
        assert stop > CKPT_EVERY and stop - max(_steps_by_run(log)[0]) in (0, -1)  # the step it stopped at
        state = bed.wait_for(lambda: _state(bed, job) in ENDED and _state(bed, job), 240, "the requeued job to finish")
        assert state == "COMPLETED", log.read_text()[-3000:]
        runs = _steps_by_run(log)
        assert len(runs) == 2 and min(runs[1]) == stop + 1 and max(runs[1]) == STEPS, runs
    finally:
        bed.run(["scancel", str(job)], check=False)


def _reference(d: Path, name: str, nproc: int) -> tuple[subprocess.Popen, Path]:
    """An uninterrupted run of the same training on the host (no sleep between steps: the sleep changes no
    weight), ``nproc`` ranks: the world size of the cloud job it stands for."""
    out = d / f"{name}.pt"
    port = 29000 + nproc + os.getpid() % 500
    proc = subprocess.Popen(
        [TORCHRUN, "--nnodes=1", "--node-rank=0", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
         f"--master-port={port}", *f"-m burstd.train.example --steps {STEPS} --seed {SEED}".split(),
         "--ckpt-dir", str(d / f"{name}-ckpt"), "--out", str(out)],
        env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo"),
        stdout=(d / f"{name}.log").open("w"), stderr=subprocess.STDOUT, cwd=REPO)
    return proc, out


def test_storm_half_the_nodes_reclaimed_with_notice_then_without_every_job_completes_bit_identical(
        burst_cluster, capsys):
    bed, cfg_path, _cfg, root = burst_cluster
    d = root / "storm"
    d.mkdir()
    os.chmod(d, 0o755)
    refs = {2: _reference(d, "ref-w2", 2), 4: _reference(d, "ref-w4", 4)}
    gate, torchrun = _gated_torchrun(d, str(bed.job_env().torchrun))
    jobs = {  # name -> (job id, ckpt, log, world size); two single-node jobs and one 2-node job: 4 cloud nodes
        name: (*_submit_template(bed, tpl, bed.cloud_partition, d, name, nodes=n, torchrun=str(torchrun)), 2 * n)
        for name, tpl, n in (("s1", SINGLE, 1), ("s2", SINGLE, 1), ("m", MULTI, 2))
    }
    ids = [j for j, *_ in jobs.values()]
    try:
        bed.wait_for(lambda: all(_state(bed, j) == "RUNNING" for j in ids), 300, "every job to run on cloud nodes")
        Path(f"{gate}-0").touch()
        bed.wait_for(lambda: all(_last_step(log) >= 12 for _, _, log, _ in jobs.values()), 300,
                     "every job to train on the cloud nodes")
        # round 1, with notice: s1's node and one of m's, at once (half of the 4 nodes)
        victims = [_nodes(bed, jobs["s1"][0])[0], _nodes(bed, jobs["m"][0])[-1]]
        for node in victims:
            _preempt(cfg_path, node, NOTICE_S)
        for name in ("s1", "m"):
            job, _ckpt, log, _ = jobs[name]
            bed.wait_for(lambda job=job: _restarts(bed, job) >= 1, NOTICE_S + 60, f"{name} to be requeued")
        # round 2, without notice (a power-off): the same two jobs, once both run again (gate opened together)
        # and both have written a periodic checkpoint in this run, on their new nodes
        bed.wait_for(lambda: all(_state(bed, jobs[n][0]) == "RUNNING" for n in ("s1", "m")), 300,
                     "s1 and m to run again")
        Path(f"{gate}-1").touch()
        Path(f"{gate}-2").touch()  # the run after the power-off starts as soon as Slurm starts it

        def past_a_checkpoint(name: str) -> bool:
            _job, ckpt, log, _ = jobs[name]
            runs = _steps_by_run(log)
            return len(runs) >= 2 and bool(runs[-1]) and max(_complete_checkpoints(ckpt), default=0) >= min(runs[-1])

        bed.wait_for(lambda: past_a_checkpoint("s1") and past_a_checkpoint("m"), 300,
                     "s1 and m to train again past a periodic checkpoint")
        victims = [_nodes(bed, jobs["s1"][0])[0], _nodes(bed, jobs["m"][0])[0]]
        for node in victims:
            said = " ".join(_preempt(cfg_path, node, 0).split())
            assert f"node {node} " in said and "powered off without notice" in said and "notice given" not in said
        for job, _ckpt, log, _ in jobs.values():
            state = bed.wait_for(lambda job=job: _state(bed, job) in ENDED and _state(bed, job), 600,
                                 "every job to complete")
            assert state == "COMPLETED", log.read_text()[-3000:]
        for proc, _ in refs.values():
            assert proc.wait(300) == 0
        rows = []
        for name, (job, ckpt, log, world) in jobs.items():
            redone = _lost_steps(log)
            kinds = ["notice", "power-off"] if name != "s2" else []
            assert len(redone) == len(kinds), (name, _steps_by_run(log))
            rows.append((name, job, world, _restarts(bed, job), redone,
                         _same_weights(ckpt / "final.pt", refs[world][1])))
            if kinds:
                assert redone[0] <= 1, f"{name} lost {redone[0]} steps with notice"
                assert redone[1] <= CKPT_EVERY, f"{name} lost {redone[1]} steps without notice"
                if world > 2:  # two nodes: the survivors saved just in time (burstd.train.survivor)
                    assert redone[1] <= 1, f"{name} lost {redone[1]} steps without notice on two nodes"
                    # (the survivors' own line is not in the log: srun, which relays their output, ran on the
                    # lost node; the resumed run says where it started)
                    assert "reason jit)" in log.read_text(errors="replace"), log.read_text()[-3000:]
        with capsys.disabled():
            print("\njob   id  ranks restarts  steps redone (notice, power-off)  bit-identical")
            for name, job, world, restarts, redone, same in rows:
                print(f"{name:<4} {job:>3}  {world:>5} {restarts:>8}  {redone!s:<31} {same}")
        assert all(row[-1] for row in rows), rows
        # deliberate reclaims are recorded as the preemptions they are, in the daemon and on the nodes
        daemon_log = (root / "burstd.log").read_text(errors="replace")
        assert "preempted: the provider reclaimed the instance" in daemon_log
        assert "instance vanished" not in daemon_log
        assert not [n for n in bed.cloud_nodes if "vanished" in bed.node(n).get("Reason", "")]
        # back to idle~, the nodes carry none of burstd's reasons from the reclaims ("burstd: preempted ...")
        left = bed.wait_for(lambda: all("POWERED_DOWN" in bed.node(n).get("State", "") for n in bed.cloud_nodes)
                            and {n: bed.node(n).get("Reason", "") for n in bed.cloud_nodes}, 240,
                            "every cloud node to be powered down again")
        bed.wait_for(lambda: not [n for n in bed.cloud_nodes if bed.node(n).get("Reason", "").startswith("burstd")],
                     60, f"burstd to clear its stale reasons (were {left})")
        assert "stale node reason cleared" in (root / "burstd.log").read_text(errors="replace")
    finally:
        for j in ids:
            bed.run(["scancel", str(j)], check=False)
        for proc, _ in refs.values():
            if proc.poll() is None:
                proc.kill()
