"""The sbatch templates' batch shells survive a storm of signals at any instant.

bash 5.2 runs a pending trap while it parses a command substitution, parses the trap's action as if inside that
``$(``, and aborts the whole job script (``trap: line 2: unexpected EOF while looking for matching `)'``,
``reader_loop: bad jump``). A template that runs any ``$(...)`` after installing its traps lost about one job in
four to a stream of USR1 here, and once in a while to a single ``scancel --batch --signal=USR1`` in the suite.

Real: bash and the templates. Faked at the edges (on PATH): torchrun, which stops on USR1 or TERM like the real
one and exits with the requeue code; the job's python, which answers ``should-requeue`` with its one line; and
scontrol, which logs the requeue. The launch, the checkpoint query and the requeue are tested for real in
tests/integration/test_train_torchrun.py and the preemption storm.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "sbatch_templates"
RUNS = 10

FAKES = {
    # torchrun: trains until a signal, then "checkpoints" for a moment and exits as a preempted worker would
    "torchrun": "#!/bin/bash\ntrap 'trap \"\" USR1 TERM; sleep 0.2; exit 85' USR1 TERM\n"
                "for i in $(seq 1 40); do sleep 0.02; done\nexit 85\n",
    # the job's python: `python -m burstd.train should-requeue DIR [--node N]` prints the line to log
    "python": "#!/bin/bash\nsleep 0.05\necho \"preempted on vm1 at step 5, checkpoint saved\"\n",
    # scontrol requeue JOBID; scontrol show hostnames / show node (the multi-node template's set-up)
    "scontrol": "#!/bin/bash\ncase \"$1 $2\" in\n  'show hostnames') echo vm1 ;;\n"
                "  'show node') echo 'NodeName=vm1 NodeAddr=10.0.0.9 State=ALLOCATED' ;;\n"
                "  *) echo \"$*\" >> \"$SCONTROL_LOG\" ;;\nesac\n",
    # the multi-node template starts torchrun through srun on every node; here one node, same process
    "srun": "#!/bin/bash\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n",
}


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def storm(template: str, fakes: Path, tmp_path: Path, run: int, sig: int) -> tuple[int, str, str]:
    """Run the template as Slurm would start its batch shell, signal it every few ms until it exits."""
    log, scontrol_log = tmp_path / f"run{run}.log", tmp_path / f"scontrol{run}.log"
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}", "SLURM_JOB_ID": str(4000 + run),
           "SLURM_JOB_NAME": "train", "SLURM_JOB_NODELIST": "vm1", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
           "CKPT_DIR": str(tmp_path / "ckpt"), "PYTHON": str(fakes / "python"), "TORCHRUN": str(fakes / "torchrun"),
           "SCONTROL_LOG": str(scontrol_log)}
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", str(TEMPLATES / template)], stdout=out, stderr=subprocess.STDOUT, env=env)
        time.sleep(0.1)  # past the set-up, into the training
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.001 * (run % 5 + 1))
        rc = proc.wait(timeout=20)
    requeues = scontrol_log.read_text() if scontrol_log.exists() else ""
    return rc, log.read_text(), requeues


@pytest.mark.parametrize("template", ["torchrun-single-node.sbatch", "torchrun-multi-node.sbatch"])
def test_a_storm_of_preemption_signals_never_aborts_the_batch_shell_and_the_job_requeues(template, fakes,
                                                                                          tmp_path):
    # the multi-node template's USR1 goes to its srun (the tasks), not its batch shell; TERM is what it traps
    sig = signal.SIGUSR1 if template.startswith("torchrun-single") else signal.SIGTERM
    for run in range(RUNS):
        rc, text, requeues = storm(template, fakes, tmp_path, run, sig)
        assert "bad jump" not in text and "unexpected EOF" not in text, text
        assert rc >= 0, (rc, text)  # not killed by a signal (bash aborts with SIGABRT)
        if sig == signal.SIGUSR1:
            assert rc == 0 and f"requeue {4000 + run}" in requeues, (rc, text, requeues)
            assert f"checkpoint saved, requeued (job {4000 + run})" in text, text
        else:
            # a cancel ends the job with torchrun's failure, whatever stage the TERMs caught it in, never requeued
            assert rc != 0 and not requeues, (rc, text, requeues)
            assert "got TERM (cancel)" in text and "cancelled: not requeueing" in text, text


@pytest.mark.parametrize("template", ["torchrun-single-node.sbatch", "torchrun-multi-node.sbatch"])
def test_only_the_launch_carries_the_marker_the_agent_signals_by(template, fakes, tmp_path):
    """burstd-agent signals a marked job's leaf processes until its torch workers exist: a set-up command that
    carried BURSTD_PREEMPTIBLE (``scontrol`` finding the rendezvous node, ``date``) could be killed by the
    notice. The templates export it just before the launch, which catches the signal (burstd.train.launch)."""
    seen = tmp_path / "marker.log"
    for name in ("date", "scontrol"):  # set-up commands: log whether they carry the marker, then do their job
        real = fakes / name
        body = real.read_text().split("\n", 1)[1] if real.exists() else 'exec /bin/date "$@"\n'
        real.write_text(f'#!/bin/bash\necho "{name} ${{BURSTD_PREEMPTIBLE:-}}" >> "$MARKER_LOG"\n{body}')
        real.chmod(0o755)
    launcher = fakes / "torchrun"
    launcher.write_text('#!/bin/bash\necho "launch ${BURSTD_PREEMPTIBLE:-}" >> "$MARKER_LOG"\nexit 0\n')
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}", "SLURM_JOB_ID": "4100", "SLURM_JOB_NAME": "train",
           "SLURM_JOB_NODELIST": "vm1", "SLURM_NNODES": "1", "SLURM_NODEID": "0", "CKPT_DIR": str(tmp_path / "ckpt"),
           "PYTHON": str(fakes / "python"), "TORCHRUN": str(launcher), "SCONTROL_LOG": str(tmp_path / "sc.log"),
           "MARKER_LOG": str(seen)}
    env.pop("SLURM_JOB_START_TIME", None)  # so the single-node template asks `date` when the run started
    env.pop("BURSTD_PREEMPTIBLE", None)
    done = subprocess.run(["bash", str(TEMPLATES / template)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "training finished" in done.stdout, done
    lines = seen.read_text().splitlines()
    assert lines[-1] == "launch 1", lines
    setup = lines[:-1]
    assert setup, "no set-up command ran: the test would prove nothing"
    assert all(line.split(" ", 1)[1] == "" for line in setup), lines
