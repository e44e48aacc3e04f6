"""Slurm's power-saving programs: hand the node list to the daemon and return at once.

    ResumeProgram=/usr/lib/burstd/hooks/resume.sh      (exec python -m burstd.daemon.hooks resume "$@")
    python -m burstd.daemon.hooks resume 'cloud[1-3]'       # + SLURM_RESUME_FILE when Slurm sets it
    python -m burstd.daemon.hooks suspend cloud2
    python -m burstd.daemon.hooks resume-fail cloud4

Slurm runs these as SlurmUser in their own process group and kills the group after ResumeTimeout, and
slurmscriptd waits for them, so they must never block: standard library only (no pydantic, no
httpx), the config file read with ``tomllib`` for two keys, one POST over the unix socket with a
short timeout. Exit 0 when the daemon accepted the call; 2 for bad input (malformed hostlist,
unknown node, unreadable resume file); 3 when the daemon is down or refused. The reason always goes to
stderr (slurmctld logs it) as one line starting ``burstd-hook:``.
"""

from __future__ import annotations

import time

T0 = time.time()  # when this hook started running Python code: sent along so the daemon can log the latency

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tomllib  # noqa: E402

from burstd.daemon.client import ApiError, post_unix_json  # noqa: E402
from burstd.slurm.hostlist import HostlistError, expand  # noqa: E402  (standard library only)

KINDS = ("resume", "suspend", "resume-fail")
DEFAULT_SOCKET = "/run/burstd/burstd.sock"
EXIT_USAGE, EXIT_DAEMON = 2, 3


def _settings() -> tuple[str, float]:
    path = os.environ.get("BURSTD_CONFIG", "/etc/burstd/burstd.toml")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        data = {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"cannot read config {path}: {exc.__class__.__name__}: {exc}") from None
    api, daemon = data.get("api", {}), data.get("daemon", {})
    sock = os.environ.get("BURSTD_SOCKET") or (api.get("socket", DEFAULT_SOCKET) if isinstance(api, dict) else None)
    timeout = daemon.get("hook_timeout_s", 2.0) if isinstance(daemon, dict) else None
    # the same bounds as burstd.config (slurmscriptd waits on this process)
    if not isinstance(sock, str) or not sock:
        raise ValueError(f"{path}: api.socket: must be a path")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 30:
        raise ValueError(f"{path}: daemon.hook_timeout_s: must be a number of seconds in (0, 30], not {timeout!r}")
    return sock, float(timeout)


def _resume_job(j: dict) -> dict:
    """One job of SLURM_RESUME_FILE. 22.05 names its nodes ``nodes``; 23.02+ ``nodes_alloc`` (all the job's
    nodes) and ``nodes_resume`` (those being resumed now); 26.05 adds ``priority`` and ``exclusive``."""
    out = {"job_id": int(j["job_id"]), "nodes": str(j.get("nodes_alloc") or j.get("nodes") or "")}
    if j.get("priority") is not None:
        out["priority"] = int(j["priority"])
    if j.get("exclusive") is not None:
        out["exclusive"] = str(j["exclusive"])
    return out


def _resume_jobs() -> list[dict]:
    path = os.environ.get("SLURM_RESUME_FILE")
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            data = json.load(fh)
        jobs = [_resume_job(j) for j in data.get("jobs", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"SLURM_RESUME_FILE {path}: unreadable ({exc.__class__.__name__}: {exc})") from None
    return jobs


def run(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in KINDS:
        print(f"burstd-hook: usage: burstd-hook {{{'|'.join(KINDS)}}} HOSTLIST", file=sys.stderr)
        return EXIT_USAGE
    kind, hostlist = argv
    try:
        expand(hostlist, validate=True)  # fail before bothering the daemon
        jobs = _resume_jobs() if kind == "resume" else []
        sock, timeout = _settings()
    except (HostlistError, ValueError) as exc:
        print(f"burstd-hook: {kind}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        post_unix_json(sock, f"/v1/hooks/{kind}", {"hostlist": hostlist, "jobs": jobs, "t0": T0, "timeout_s": timeout},
                       timeout=timeout)
    except ApiError as exc:
        print(f"burstd-hook: {kind} {hostlist}: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.status in (404, 422) else EXIT_DAEMON
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
