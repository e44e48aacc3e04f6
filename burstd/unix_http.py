"""Plain HTTP over a unix socket (the daemon's control socket, slurmrestd's): the one way burstd builds it."""

from __future__ import annotations

import httpx


def unix_transport(path: str) -> httpx.HTTPTransport:
    """A transport to the unix socket at ``path``. No TLS is spoken there, so no CA store is loaded: httpx builds
    one for every transport by default, about 25 ms of CPU, which every agent probe, hook call and progress report
    on a busy head would pay again."""
    return httpx.HTTPTransport(uds=path, verify=False)
