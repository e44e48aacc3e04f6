"""The pool's observed preemption rate, from the daemon to the jobs on this node (issue 22).

The agent asks the daemon (``GET /v1/preempt-rate/NODE``) every few minutes and keeps the answer in
``agent.preempt_rate_file`` (one number, preemptions per node-hour; no file while the pool's rate is unknown).
Slurm's TaskProlog then puts it into every task's environment, where ``burstd.train`` picks its checkpoint
interval from it (Young/Daly, ``burstd.train.interval``)::

    # slurm.conf on the cloud nodes
    TaskProlog=/usr/local/sbin/burstd-task-prolog   # runs: python -m burstd.agent.preempt_rate

A TaskProlog's stdout lines ``export NAME=value`` set the task's environment. The number is checked twice, as
the daemon's answer and as the file's text, so only a plain decimal ever reaches that line; a value the job
already set (``BURSTD_PREEMPT_RATE_PER_HOUR`` in its own environment) is left alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Mapping

from burstd.agent.report import DaemonUnreachable, get_from_daemon
from burstd.domain.preempt_rate import rate_text
from burstd.train.interval import RATE_ENV, rate_from_env

log = logging.getLogger("burstd.agent")

RATE_PATH = "/v1/preempt-rate/"
DEFAULT_FILE = "/run/burstd/preempt-rate"
REFRESH_S = 300.0  # the rate moves over hours; a job reads it when its task starts


def fetch_rate(daemon_url: str, node: str, *, token_file: str | None = None, ca_file: str | None = None,
               timeout_s: float = 5.0) -> float | None:
    """The rate the daemon observed for ``node``'s pool; None while it is unknown. ``DaemonUnreachable`` when the
    daemon cannot be asked or its answer is not a valid rate."""
    r = get_from_daemon(daemon_url, RATE_PATH + node, token_file=token_file, ca_file=ca_file, timeout_s=timeout_s)
    if r is None:  # every cloud node has a pool: a 404 is a daemon that cannot say
        raise DaemonUnreachable(f"daemon answered 404 for {RATE_PATH}{node}")
    try:
        rate = r.json()["rate_per_node_hour"]
    except (ValueError, KeyError, TypeError):
        raise DaemonUnreachable(f"daemon's {RATE_PATH} answer has no rate_per_node_hour") from None
    if rate is None:
        return None
    try:
        return float(rate_text(rate))
    except ValueError as exc:
        raise DaemonUnreachable(f"daemon's {RATE_PATH} answer: {exc}") from None


def write_rate_file(path: str, rate: float | None) -> None:
    """Replace ``path`` atomically with the rate (world-readable: job users read it); remove it for None."""
    if rate is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    text = rate_text(rate) + "\n"
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".preempt-rate.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def refresh(daemon_url: str, node: str, path: str, *, token_file: str | None = None,
            ca_file: str | None = None) -> bool:
    """Ask the daemon and update the file; False (and the file kept as it was) when the daemon cannot say."""
    try:
        write_rate_file(path, fetch_rate(daemon_url, node, token_file=token_file, ca_file=ca_file))
        return True
    except (DaemonUnreachable, OSError, ValueError) as exc:
        log.error("preemption rate not refreshed: %s", exc)
        return False


def keep_fresh(stop: threading.Event, daemon_url: str, node: str, path: str, *, token_file: str | None = None,
               ca_file: str | None = None, every_s: float = REFRESH_S) -> None:
    """The agent's thread: refresh at once, then every ``every_s`` until ``stop``."""
    while True:
        refresh(daemon_url, node, path, token_file=token_file, ca_file=ca_file)
        if stop.wait(every_s):
            return


def task_prolog_lines(env: Mapping[str, str], path: str) -> list[str]:
    """What the TaskProlog prints: one ``export`` line when the file holds a valid rate and the job set none."""
    if env.get(RATE_ENV, "").strip():
        return []
    try:
        with open(path, "rb") as f:
            raw = f.read(64).decode("ascii", errors="replace").strip()
    except OSError:
        return []  # no rate known (yet): the job keeps its default interval
    try:
        rate = rate_from_env({RATE_ENV: raw})
        return [] if rate is None else [f"export {RATE_ENV}={rate_text(rate)}"]
    except ValueError as exc:
        print(f"burstd task prolog: {path}: {exc}", file=sys.stderr)
        return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="burstd-task-prolog", description="Slurm TaskProlog: the pool's preemption "
                                 "rate into the task's environment")
    ap.add_argument("--file", default=DEFAULT_FILE, help="the agent's rate file (default %(default)s)")
    args = ap.parse_args(argv)
    for line in task_prolog_lines(os.environ, args.file):
        print(line)
    from burstd.agent.stage_job import STAGING_DIR, task_prolog_notice  # issue 24: a burst job without data

    for line in task_prolog_notice(os.environ, STAGING_DIR):
        print(line)
    return 0  # never fail the task over an optional hint


if __name__ == "__main__":
    raise SystemExit(main())
