"""A training job tells burstd how it is doing: steps, step time and GPU use, sealed with the job's own MUNGE
credential (no torch needed here).

    reporter = ProgressReporter.from_env()        # None unless BURSTD_PROGRESS_URL and SLURM_JOB_ID are set
    for step in ...:
        ...
        reporter and reporter.step_done(step + 1)

``Preemptible`` does this for rank 0 by itself. Every ``BURSTD_PROGRESS_EVERY_S`` (30 s by default) the reporter
takes the mean step time since its last report, the GPUs' utilisation (``burstd.train.gpu``, where NVML is), and
posts ``{"job", "step", "step_time_s", "gpu_util", "steps_per_epoch"}`` as the payload of ``munge -s`` to
``<url>/v1/jobs/<job>/progress`` from a background thread. The training loop never waits on it and never fails
because of it: a report that cannot go is dropped, and said once on stderr.

``BURSTD_PROGRESS_URL``: the daemon's TLS listener (``https://head:8787``, with ``BURSTD_PROGRESS_CA`` naming the CA
file if it is not in the system's store), or ``unix:/path`` for a socket the job may reach. ``MUNGE_SOCKET``: a
munged socket other than the default. burstd believes a report only about the job that sealed it (docs/security.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from burstd.train.gpu import gpu_utilization

URL_ENV = "BURSTD_PROGRESS_URL"
CA_ENV = "BURSTD_PROGRESS_CA"
EVERY_ENV = "BURSTD_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 30.0


def munge_seal(payload: bytes, socket: str | None = None) -> str:
    """A MUNGE credential carrying ``payload`` (stdin, never the command line), made by this process's uid."""
    argv = ["munge"] + ([f"--socket={socket}"] if socket else [])
    done = subprocess.run(argv, input=payload, capture_output=True, timeout=10, check=False)
    if done.returncode != 0:
        raise OSError(f"munge: {done.stderr.decode(errors='replace').strip()[:200]}")
    return done.stdout.decode().strip()


def http_post(url: str, path: str, credential: str, ca: str | None) -> int:
    import httpx  # only when a report is sent

    from burstd.unix_http import unix_transport

    headers = {"Authorization": f"Munge {credential}"}
    if url.startswith("unix:"):
        with httpx.Client(transport=unix_transport(url[5:]), base_url="http://burstd", timeout=10) as c:
            return c.post(path, headers=headers).status_code
    import ssl

    verify: Any = ssl.create_default_context(cafile=ca) if ca else True
    with httpx.Client(base_url=url.rstrip("/"), verify=verify, timeout=10) as c:
        return c.post(path, headers=headers).status_code


class ProgressReporter:
    def __init__(self, url: str, job_id: int, *, every_s: float = DEFAULT_EVERY_S,
                 steps_per_epoch: int | None = None, ca: str | None = None,
                 seal: Callable[[bytes], str] = munge_seal,
                 post: Callable[[str, str, str, str | None], int] = http_post,
                 gpu: Callable[[], list[float] | None] = gpu_utilization,
                 clock: Callable[[], float] = time.monotonic):
        if every_s <= 0 or job_id < 1:
            raise ValueError(f"every_s must be > 0 and job_id >= 1 (got {every_s}, {job_id})")
        self.url, self.job_id, self.every_s, self.ca = url, job_id, every_s, ca
        self.steps_per_epoch = steps_per_epoch
        self._seal, self._post, self._gpu, self._clock = seal, post, gpu, clock
        self._mark: tuple[float, int] | None = None  # (when, step) of the last report (or of the first step)
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failed = 0
        self.last_error: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> ProgressReporter | None:
        env = os.environ if env is None else env
        url, job = env.get(URL_ENV), env.get("SLURM_JOB_ID", "")
        if not url or not job.isdigit():
            return None
        every = float(env.get(EVERY_ENV) or DEFAULT_EVERY_S)
        socket = env.get("MUNGE_SOCKET") or None
        return cls(url, int(job), every_s=every, ca=env.get(CA_ENV) or None,
                   seal=lambda payload: munge_seal(payload, socket), **kwargs)

    def step_done(self, step: int) -> None:
        """After each step (the number of steps done); reports at most once every ``every_s``. Cheap."""
        now = self._clock()
        if self._mark is None:
            self._mark = (now, step)
            return
        t0, s0 = self._mark
        if now - t0 < self.every_s or step <= s0:
            return
        self._mark = (now, step)
        report: dict[str, Any] = {"job": self.job_id, "step": step, "step_time_s": (now - t0) / (step - s0)}
        if self.steps_per_epoch:
            report["steps_per_epoch"] = self.steps_per_epoch
        if self._thread is not None and self._thread.is_alive():
            return  # the last one is still on its way: skip this one rather than queue
        self._thread = threading.Thread(target=self._send, args=(report,), name="burstd-progress", daemon=True)
        self._thread.start()

    def _send(self, report: dict[str, Any]) -> None:
        try:
            util = self._gpu()
            if util:
                report["gpu_util"] = util[:64]
            credential = self._seal(json.dumps(report).encode())
            status = self._post(self.url, f"/v1/jobs/{self.job_id}/progress", credential, self.ca)
            if status != 202:
                raise OSError(f"burstd answered {status}")
            self.sent += 1
        except Exception as exc:  # noqa: BLE001 - progress is a courtesy: training goes on whatever happens
            self.failed += 1
            self.last_error = str(exc)
            if self.failed == 1:
                print(f"burstd.train: progress report not sent ({exc}); training goes on, later ones are tried "
                      f"quietly", file=sys.stderr, flush=True)

    def close(self, timeout: float = 5.0) -> None:
        """Wait (a little) for a report on its way."""
        if self._thread is not None:
            self._thread.join(timeout)
