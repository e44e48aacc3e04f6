"""Checkpoint queries for job scripts (no torch needed).

    python -m burstd.train latest DIR [--json]     newest complete checkpoint (exit 1 if none)
    python -m burstd.train should-requeue DIR [--node NAME]
                                                   exit 0 if this run of this job stopped for preemption, and
                                                   print "preempted on NODE at step N, checkpoint saved"

``should-requeue`` is what the sbatch templates ask after torchrun exits non-zero: torchrun reports any worker's
non-zero exit (including the requeue code) as its own failure, so the job script reads the newest complete
checkpoint instead: written for a preemption, by this job (``SLURM_JOB_ID``), in this run
(``SLURM_RESTART_COUNT``)? Then ``scontrol requeue`` is right; otherwise the failure is real.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from burstd.train.store import CheckpointError, CheckpointStore


def should_requeue(location: str, env: dict[str, str] | None = None) -> tuple[bool, str]:
    env = dict(os.environ if env is None else env)
    latest = CheckpointStore(location).listing().latest
    if latest is None:
        return False, f"no complete checkpoint in {location}"
    m = latest.manifest
    job, restart = env.get("SLURM_JOB_ID"), env.get("SLURM_RESTART_COUNT", "0")
    if m.get("reason") == "jit" and str(m.get("slurm_restart_count", "0")) == restart:
        # a node went without notice (or a rank died): not this script's call, burstd requeues a job whose cloud
        # node was lost, and a rank that crashed on a bug must not requeue the job forever
        return False, (f"a rank of this job was lost after step {latest.step}: the surviving ranks saved "
                       f"{latest.location} just in time (burstd requeues a job whose node was lost)")
    if m.get("reason") != "preempt":
        return False, f"newest checkpoint {latest.location} was written for {m.get('reason')!r}, not a preemption"
    if job is not None and str(m.get("slurm_job_id")) != job:
        return False, f"newest checkpoint {latest.location} belongs to job {m.get('slurm_job_id')}, not {job}"
    if str(m.get("slurm_restart_count", "0")) != restart:
        return False, (f"newest checkpoint {latest.location} is from restart {m.get('slurm_restart_count')}, "
                       f"this is restart {restart}")
    return True, f"checkpoint {latest.location} (step {latest.step}) was written for a preemption in this run"


def preempted_line(location: str, node: str | None = None) -> str:
    """The line the templates print for a preemption: where, at which step, and that the work is saved."""
    latest = CheckpointStore(location).listing().latest
    if latest is None:
        raise CheckpointError(f"no complete checkpoint in {location}")
    where = node or latest.manifest.get("node") or latest.manifest.get("host") or "?"
    return f"preempted on {where} at step {latest.step}, checkpoint saved"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burstd.train", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_latest = sub.add_parser("latest", help="newest complete checkpoint")
    p_latest.add_argument("location")
    p_latest.add_argument("--json", action="store_true")
    p_req = sub.add_parser("should-requeue", help="exit 0 if this run stopped for preemption")
    p_req.add_argument("location")
    p_req.add_argument("--node", help="where it ran, for the printed line (default: the checkpoint's node)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "latest":
            listing = CheckpointStore(args.location).listing()
            latest = listing.latest
            if args.json:
                print(json.dumps({"latest": None if latest is None else
                                  {"step": latest.step, "location": latest.location, "manifest": latest.manifest},
                                  "complete": [c.step for c in listing.complete], "torn": listing.torn}))
            elif latest is None:
                print(f"no complete checkpoint in {args.location}", file=sys.stderr)
            else:
                print(f"step {latest.step} reason {latest.reason} at {latest.location}")
            return 0 if latest is not None else 1
        ok, why = should_requeue(args.location)
        if not ok:
            print(why, file=sys.stderr)
            return 1
        print(preempted_line(args.location, args.node))
        return 0
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
