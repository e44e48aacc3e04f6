"""Deterministic crash points for the crash test (invariant 6).

``crash_point("launch.before_provider")`` does nothing unless ``BURSTD_CRASH_AT`` names that point:
``BURSTD_CRASH_AT=launch.before_provider:3`` makes the process ``os._exit(CRASH_EXIT)`` (no cleanup,
no flush: as close to SIGKILL as Python gets) the 3rd time the point is reached. Several points may be
given, comma-separated. Unset in production; the check is one dict lookup.
"""

from __future__ import annotations

import os
import threading

CRASH_ENV = "BURSTD_CRASH_AT"
CRASH_EXIT = 86

#: Every point the daemon passes; the crash test iterates over these.
POINTS = (
    "resume.after_commit",  # the hook's REQUESTED lease is committed, before the reply
    "launch.before_launching",  # before REQUESTED -> LAUNCHING is committed
    "launch.before_provider",  # LAUNCHING committed, provider.launch not called
    "launch.after_provider",  # the provider made the VM; BOOTING not recorded
    "launch.after_booting",  # BOOTING recorded
    "ready.before",  # before BOOTING -> READY
    "terminate.before_provider",  # TERMINATING committed, provider.terminate not called
    "terminate.after_provider",  # provider terminated; TERMINATED not recorded
    "orphan.before_terminate",  # the orphan's termination recorded, the provider not yet asked
    "fail.before_requeue",  # a lost node's lease FAILED and its requeue owed (durable), no job requeued yet
    "fail.after_requeue",  # its jobs requeued, the owed record not yet forgotten
    "cycle.after_snapshot",  # Slurm and the clouds read, nothing planned from them yet
    "cycle.after_intents",  # hook and agent intents acted on, not yet marked applied
    # inside cloud calls (burstd/providers): the cloud did the work, the daemon never sees its answer
    "aws.create_fleet.unanswered",  # CreateFleet returned (the VMs exist), its answer not yet read
    "aws.gang_tags.half_done",  # a gang's first instance tagged with its node and lease, the others not yet
    "aws.terminate.unanswered",  # TerminateInstances returned, its answer not yet read
    "gcp.bulk_insert.unanswered",  # bulkInsert accepted (the operation runs), not yet waited on
    "gcp.delete.unanswered",  # instances.delete accepted, its answer not yet read
)


def _parse(spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, n = part.partition(":")
        out[name] = int(n or 1)
    return out


_targets = _parse(os.environ.get(CRASH_ENV, ""))
_hits: dict[str, int] = {}
_lock = threading.Lock()  # launch workers pass the launch points at once: each hit is counted once


def crash_point(name: str) -> None:
    if not _targets or name not in _targets:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        hit = _hits[name]
    if hit >= _targets[name]:
        os.write(2, f'{{"event":"crash point reached","point":"{name}","hit":{hit}}}\n'.encode())
        os._exit(CRASH_EXIT)


def reload_from_env() -> None:
    """Re-read ``BURSTD_CRASH_AT`` (tests that set it after import)."""
    global _targets
    _targets = _parse(os.environ.get(CRASH_ENV, ""))
    _hits.clear()
