"""How long a collective may wait for a peer, and whether an error means a peer is gone (no torch import).

When a node vanishes without notice its ranks stop answering. A rank on a surviving node learns it in its next
collective: at once when the dead rank's sockets were closed (its processes were killed and the kernel said so),
else only when the collective's timeout runs out (the VM's network went with it: nothing says goodbye). That
timeout is therefore the longest a survivor can wait before it saves (``burstd.train.survivor``); the process
group's default is 30 minutes, far longer than the job has before burstd requeues it.

``BURSTD_COLLECTIVE_TIMEOUT_S`` (default 60): pass :func:`collective_timeout` to ``init_process_group``. It must
exceed the longest wait any rank has inside one collective in normal running: a straggler's step, the time one
rank spends alone before a collective (loading data, evaluating, rank 0 writing logs). Too short, a slow step
reads as a lost node: the job saves and exits for requeue, which is safe but costs a restart. Checkpoint
collectives get their own, longer timeout (:func:`checkpoint_timeout`), as rank 0 writes and fsyncs the manifest
while the others wait in a barrier.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import timedelta

TIMEOUT_ENV = "BURSTD_COLLECTIVE_TIMEOUT_S"
CHECKPOINT_TIMEOUT_ENV = "BURSTD_CHECKPOINT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CHECKPOINT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0

# What gloo and NCCL say when a peer went away or stopped answering (torch raises plain RuntimeError for gloo).
_PEER_LOSS = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|Timed out waiting|"
    r"gloo/transport|NCCL communicator was aborted|NCCL error|Socket Timeout|"
    r"remote worker crashing|ProcessGroup\w* .*(aborted|timed out|failed)",
    re.IGNORECASE,
)


def _seconds(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{key} must be a number of seconds, got {raw!r}") from None
    if not (math.isfinite(value) and 0.001 <= value <= MAX_TIMEOUT_S):
        raise ValueError(f"{key} must be a number of seconds from 0.001 to {MAX_TIMEOUT_S:g} (a week), got {raw!r}")
    return value


def collective_timeout(env: Mapping[str, str] | None = None) -> timedelta:
    """``BURSTD_COLLECTIVE_TIMEOUT_S`` (default 60 s) as the ``timeout`` of ``init_process_group``."""
    return timedelta(seconds=_seconds(os.environ if env is None else env, TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


def checkpoint_timeout(env: Mapping[str, str] | None = None) -> timedelta:
    """``BURSTD_CHECKPOINT_TIMEOUT_S`` (default 600 s): the checkpoint process group's timeout."""
    env = os.environ if env is None else env
    return timedelta(seconds=_seconds(env, CHECKPOINT_TIMEOUT_ENV, DEFAULT_CHECKPOINT_TIMEOUT_S))


def is_peer_loss(exc: BaseException) -> bool:
    """True for the errors a collective raises when another rank died or stopped answering: torch's
    ``DistError`` family (recognised by name, so this module needs no torch) and gloo's/NCCL's RuntimeErrors
    about closed connections and timeouts. A bug in the training code (a shape error, an OOM) is not one."""
    for cls in type(exc).__mro__:
        if cls.__module__.startswith("torch") and cls.__name__ in ("DistError", "DistBackendError",
                                                                   "DistNetworkError"):
            return True
    return isinstance(exc, RuntimeError) and bool(_PEER_LOSS.search(str(exc)))
