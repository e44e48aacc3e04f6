"""No notice, two "nodes": the surviving ranks save just in time, the job redoes at most the step in flight.

Two torchrun agents on this machine play the job's two nodes (static rendezvous, 2 workers each: 4 ranks of
real gloo over TCP, CPU). One node vanishes mid-run: its agent and workers are SIGKILLed at once, nothing says
goodbye (the fault-point variants make one rank die at an exact point of a step instead). The survivors' next
collective fails, one of them writes the checkpoint of the last completed step (reason ``jit``), and the surviving
agent exits with the requeue code. Both agents are then started again, as the requeued job would be: the
training resumes from that checkpoint and ends with the weights of a run that was never interrupted, bit for bit.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.testbed.procs import kill_tree, start_local_nodes
from tests.integration.torchrun_helpers import (
    REPO,
    REQUEUE,
    SEED,
    STEPS,
    assert_bit_identical,
    checkpoints,
    train_env,
)


pytestmark = [pytest.mark.torch, pytest.mark.slow]

NPROC = 2  # workers a node: ranks 0,1 on node 0 and 2,3 on node 1


def _env(**extra: str) -> dict[str, str]:
    return train_env(BURSTD_COLLECTIVE_TIMEOUT_S="30", **extra)


def _train_args(ckpt: Path, out: Path, *extra: str) -> list[str]:
    return ["-m", "burstd.train.example", "--steps", str(STEPS), "--seed", str(SEED), "--ckpt-dir", str(ckpt),
            "--out", str(out), *extra]


def _start_nodes(ckpt: Path, out: Path, logs: Path, *extra: str, env: dict[str, str] | None = None,
                 nproc: int = NPROC) -> list[subprocess.Popen]:
    """One agent a node, as the multi-node template starts them (burstd.train.launch: torchrun, quiet about a
    planned stop), each in a session of its own so a node can be killed whole."""
    return start_local_nodes([sys.executable, "-m", "burstd.train.launch"], _train_args(ckpt, out, *extra),
                             [logs / f"node{node}.log" for node in (0, 1)], env=env or _env(), cwd=REPO,
                             nproc=nproc, append=True)


def _reap(procs: list[subprocess.Popen], timeout: float = 180) -> list[int]:
    deadline = time.time() + timeout
    try:
        return [p.wait(timeout=max(deadline - time.time(), 1)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                kill_tree(p)


def _log(logs: Path) -> str:
    return "".join((logs / f"node{n}.log").read_text() for n in (0, 1) if (logs / f"node{n}.log").exists())


def _wait_for_step(logs: Path, step: int, procs: list[subprocess.Popen], timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = _log(logs)
        if re.search(rf"rank=\d step={step} ", text):
            return
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"training exited early:\n{text[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout}s:\n{_log(logs)[-3000:]}")


def _last_step_printed(text: str) -> int:
    return max((int(s) for s in re.findall(r"rank=\d step=(\d+) ", text)), default=0)


_REFERENCES: dict[tuple[str, ...], Path] = {}


def _reference(tmp_path_factory, *flags: str, ranks: int = 2 * NPROC) -> Path:
    """An uninterrupted run of as many ranks (one torchrun), once per set of model flags."""
    if (str(ranks), *flags) not in _REFERENCES:
        d = tmp_path_factory.mktemp("reference")
        cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", f"--nproc-per-node={ranks}",
               *_train_args(d / "ckpt", d / "final.pt", *flags)]
        res = subprocess.run(cmd, check=False, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        _REFERENCES[(str(ranks), *flags)] = d / "final.pt"
    return _REFERENCES[(str(ranks), *flags)]


def _resume_and_check(tmp_path: Path, ckpt: Path, out: Path, saved: int, reference: Path, *flags: str,
                      nproc: int = NPROC) -> None:
    """The requeued job: both nodes again, from the survivors' checkpoint to the end, the reference's weights."""
    logs = tmp_path / "resume"
    logs.mkdir()
    procs = _start_nodes(ckpt, out, logs, *flags, nproc=nproc)
    codes = _reap(procs)
    text = _log(logs)
    assert codes == [0, 0], text[-3000:]
    assert f"resumed from {ckpt}/step-{saved:09d} (step {saved}, reason jit)" in text, text[-3000:]
    assert_bit_identical(reference, out)


@pytest.mark.parametrize("victim", [1, 0], ids=["second-node-lost", "rendezvous-node-lost"])
def test_a_node_killed_mid_run_costs_at_most_the_step_in_flight(tmp_path, tmp_path_factory, victim):
    reference = _reference(tmp_path_factory)
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.pt"
    logs = tmp_path / "run1"
    logs.mkdir()
    # no periodic checkpoint in the whole run: without the survivors' save the job would start over
    procs = _start_nodes(ckpt, out, logs, "--ckpt-every", "0", "--step-sleep", "0.15")
    try:
        _wait_for_step(logs, 8, procs)
        killed_at = time.time()
        kill_tree(procs[victim])
        survivor = procs[1 - victim]
        code = survivor.wait(timeout=120)
        took = time.time() - killed_at
    finally:
        _reap(procs)
    text = _log(logs)
    assert code == REQUEUE, text[-3000:]
    # Survivors can stand at different steps: the dead ranks' last messages may have reached one survivor and
    # not another (a ring collective completes on some ranks only). Each saves its own last step, both
    # consistent; the newest is resumed.
    saved = checkpoints(ckpt)
    assert saved and all(m["reason"] == "jit" and m["world_size"] == 2 * NPROC for m in saved.values()), saved
    step = max(saved)
    manifest = saved[step]
    assert min(saved) >= step - 1, sorted(saved)
    assert manifest["saved_by_rank"] // NPROC == 1 - victim  # written on the surviving node
    reached = _last_step_printed(text)
    assert 8 <= step and reached - step <= 1, (step, reached)  # at most the step in flight is redone
    assert re.search(rf"burstd\.train: rank \d: lost a peer rank after step {step} .*saved step {step} just in "
                     rf"time", text), text[-3000:]
    assert "ChildFailedError" not in text.split(f"step={reached} ")[-1], text[-3000:]  # the one line, quiet
    assert took < 60, f"the survivors took {took:.1f}s to save and exit"
    _resume_and_check(tmp_path, ckpt, out, step, reference)


@pytest.mark.parametrize(
    "fault,saved_step,flags,nproc",
    [
        # rank 2 dies before sending its state of step 6: the others fail in that exchange, the model is that
        # of step 5 (the optimizer step of 6 never ran), step 5 is saved and step 6 redone
        ("gather@6@2", 5, (), NPROC),
        # rank 3 dies right after its optimizer step 6: the others have stepped too (the gradients of step 6
        # were averaged), and they fail in step_done's stop check: step 6 is saved, nothing is redone
        ("step-done@6@3", 6, (), NPROC),
        # the same loss with DistributedDataParallel's gradient hooks, one rank a node (the lone survivor
        # writes; DDP is bit-identical across a resume only up to two ranks, see burstd.train.example)
        ("gather@6@1", 5, ("--ddp",), 1),
    ],
    ids=["lost-in-exchange", "lost-after-step", "ddp-lost-in-exchange"],
)
def test_a_rank_dying_at_an_exact_point_of_a_step_leaves_a_consistent_checkpoint(tmp_path, tmp_path_factory,
                                                                                  fault, saved_step, flags, nproc):
    reference = _reference(tmp_path_factory, *flags, ranks=2 * nproc)
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.pt"
    logs = tmp_path / "run1"
    logs.mkdir()
    procs = _start_nodes(ckpt, out, logs, "--ckpt-every", "0", *flags, env=_env(BURSTD_TRAIN_FAULT=fault),
                         nproc=nproc)
    codes = _reap(procs)
    text = _log(logs)
    assert codes[0] == REQUEUE, (codes, text[-3000:])  # node 0's ranks survived
    saved = checkpoints(ckpt)
    assert sorted(saved) == [saved_step], (sorted(saved), text[-3000:])
    assert saved[saved_step]["reason"] == "jit"
    _resume_and_check(tmp_path, ckpt, out, saved_step, reference, *flags, nproc=nproc)


def test_without_jit_the_survivors_save_nothing_and_the_run_starts_over(tmp_path):
    """The baseline the survivors' save replaces: --no-jit, the same loss, nothing to resume from."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "final.pt"
    logs = tmp_path / "run1"
    logs.mkdir()
    procs = _start_nodes(ckpt, out, logs, "--ckpt-every", "0", "--no-jit", "--step-sleep", "0.15")
    try:
        _wait_for_step(logs, 8, procs)
        kill_tree(procs[1])
        code = procs[0].wait(timeout=120)
    finally:
        _reap(procs)
    text = _log(logs)
    assert code not in (0, REQUEUE), text[-3000:]
    assert checkpoints(ckpt) == {}
    assert "just in time" not in text
