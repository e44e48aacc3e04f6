"""burstd.train: make a training script survive spot preemption (needs the ``train`` extra: torch).

    from burstd.train import Preemptible

    job = Preemptible("/shared/ckpt/run1", model, optimizer, stateful={"sched": sched}, every=200)
    for step in range(job.resume(), total_steps):
        train_one_step(step)
        job.step_done(step + 1)
    job.finish()

See docs/researchers.md. ``burstd.train.signals`` and ``burstd.train.store`` do not import torch; the names below
are loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CheckpointDirError",
    "CheckpointError",
    "CheckpointManager",
    "CheckpointMismatchError",
    "CheckpointStore",
    "ForeignCheckpointError",
    "Preemptible",
    "PreemptionFlag",
    "install_handlers",
    "requeue_exit_code",
]

_WHERE = {
    "CheckpointManager": "burstd.train.checkpoint",
    "Preemptible": "burstd.train.preemptible",
    "CheckpointDirError": "burstd.train.store",
    "CheckpointError": "burstd.train.store",
    "CheckpointMismatchError": "burstd.train.store",
    "CheckpointStore": "burstd.train.store",
    "ForeignCheckpointError": "burstd.train.identity",
    "PreemptionFlag": "burstd.train.signals",
    "install_handlers": "burstd.train.signals",
    "requeue_exit_code": "burstd.train.signals",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'burstd.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
