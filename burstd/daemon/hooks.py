"""Slurm's power-saving programs: hand the node list to the daemon and return at once.

    ResumeProgram=/usr/lib/burstd/hooks/resume.sh      (exec python -m burstd.daemon.hooks resume "$@")
    python -m burstd.daemon.hooks resume 'cloud[1-3]'       # + SLURM_RESUME_FILE when Slurm sets it
    python -m burstd.daemon.hooks suspend cloud2
    python -m burstd.daemon.hooks resume-fail cloud4

Slurm runs these as SlurmUser in their own process group and kills the group after ResumeTimeout, and
slurmscriptd waits for them, so they must never block: standard library only (no pydantic, no
httpx), the config file read with ``tomllib`` for two keys, one POST over the unix socket with a
short timeout. Exit 0 when the daemon accepted the call; 2 for bad input (malformed hostlist,
unknown node, a resume file that is unreadable, over 16 MiB, not plain JSON or with ids that are not integers, a
request too large); 3 when the daemon is down, busy or refused. The reason always goes to
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
from burstd.domain.hostlist import HostlistError, expand  # noqa: E402  (standard library only)

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


MAX_RESUME_FILE_BYTES = 16 << 20  # Slurm writes a few hundred bytes a job; a file past this is not Slurm's
MAX_ID = 2**32 - 1  # Slurm job ids and priorities are 32-bit


def _uint(value: object, what: str, low: int = 1) -> int:
    """A JSON integer, exactly: ``1.9``, ``true`` and ``"7"`` are refused, never read as 1 or 7."""
    if type(value) is not int or not low <= value <= MAX_ID:
        raise ValueError(f"{what} must be an integer in {low}..{MAX_ID}, not {value!r:.40}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {value!r:.40}")
    return value


def _resume_job(j: object) -> dict:
    """One job of SLURM_RESUME_FILE. 22.05 names its nodes ``nodes``; 23.02+ ``nodes_alloc`` (all the job's
    nodes) and ``nodes_resume`` (those being resumed now); 26.05 adds ``priority`` and ``exclusive``."""
    if not isinstance(j, dict):
        raise ValueError(f"a job must be an object, not {j!r:.40}")
    job_id = _uint(j.get("job_id"), "job_id")
    nodes = j.get("nodes_alloc") or j.get("nodes") or ""
    out: dict = {"job_id": job_id, "nodes": _text(nodes, f"job {job_id} nodes")}
    if j.get("priority") is not None:
        out["priority"] = _uint(j["priority"], f"job {job_id} priority", low=0)
    if j.get("exclusive") is not None:
        out["exclusive"] = _text(j["exclusive"], f"job {job_id} exclusive")
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is out of range")
    return value


def parse_resume_file(raw: bytes) -> list[dict]:
    """The jobs of a SLURM_RESUME_FILE's bytes, each ``{"job_id", "nodes"[, "priority", "exclusive"]}``;
    ValueError (one line) for anything else: not JSON, NaN/Infinity, nested too deep, a coerced id."""
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digits limit, the two hooks above
        raise ValueError(str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__) from None
    if not isinstance(data, dict):
        raise ValueError(f"must be a JSON object, not {type(data).__name__}")
    jobs = data.get("jobs", [])
    if not isinstance(jobs, list):
        raise ValueError(f"jobs must be a list, not {type(jobs).__name__}")
    return [_resume_job(j) for j in jobs]


def read_resume_file(path: str, max_bytes: int = MAX_RESUME_FILE_BYTES) -> list[dict]:
    """SLURM_RESUME_FILE, read at most ``max_bytes`` (a 300 MB file is refused, never read whole)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        return parse_resume_file(raw)
    except OSError as exc:
        raise ValueError(f"SLURM_RESUME_FILE {path}: unreadable ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ValueError(f"SLURM_RESUME_FILE {path}: {exc}") from None


def _resume_jobs() -> list[dict]:
    path = os.environ.get("SLURM_RESUME_FILE")
    return read_resume_file(path) if path else []


def _say(message: str) -> None:
    """The one stderr line slurmctld logs (a path or daemon answer with a line break stays on it)."""
    print("burstd-hook: " + " ".join(message.split("\n")).replace("\r", " "), file=sys.stderr)


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
        _say(f"{kind}: {exc}")
        return EXIT_USAGE
    # the daemon acts only while this hook still waits: past ``deadline`` it records nothing (a slow request
    # must never commit a lease for a hook that already gave up and told Slurm so)
    payload = {"hostlist": hostlist, "jobs": jobs, "t0": T0, "timeout_s": timeout, "deadline": time.time() + timeout}
    try:
        post_unix_json(sock, f"/v1/hooks/{kind}", payload, timeout=timeout)
    except ApiError as exc:
        _say(f"{kind} {hostlist}: {exc}")
        return EXIT_USAGE if exc.status in (404, 413, 422) else EXIT_DAEMON
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
