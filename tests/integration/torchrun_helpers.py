"""What the torchrun tests share (test_train_torchrun.py: one node; test_train_survivor.py: two): the example
job's settings, its environment, the checkpoints it left, and the bit-for-bit comparison of two final states."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = 24
SEED = 7
REQUEUE = 85  # burstd.train's exit code for "requeue me"


def train_env(**extra: str) -> dict[str, str]:
    """This environment for a training run: the repo importable, one thread a rank, no fault left over."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("BURSTD_TRAIN_FAULT", None)
    env.update(extra)
    return env


def checkpoints(ckpt: Path) -> dict[int, dict]:
    """The complete checkpoints under ``ckpt`` (a manifest is written last): step -> manifest."""
    out = {}
    for p in sorted(ckpt.glob("step-?????????")):
        manifest = p / "burstd-checkpoint.json"
        if manifest.exists():
            out[int(p.name[5:])] = json.loads(manifest.read_text())
    return out


def assert_bit_identical(a_path: Path, b_path: Path) -> None:
    """Two final states (model, optimizer, scheduler) equal bit for bit."""
    import torch

    a, b = torch.load(a_path), torch.load(b_path)
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), f"model tensor {key} differs"
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for pid in sa:
        for key in sa[pid]:
            assert torch.equal(torch.as_tensor(sa[pid][key]), torch.as_tensor(sb[pid][key])), f"optim {pid}.{key}"
    assert a["scheduler"] == b["scheduler"]
