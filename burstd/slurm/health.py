"""Is slurmctld serving? Chosen from the live release (``features.ctld_http``), never by trying one way first:

* 25.11+: slurmctld answers HTTP on its own port; ``GET /readyz`` is 2xx while it services RPCs (no auth);
* older releases: ``scontrol ping`` ("Slurmctld(primary) at HOST is UP").

    adapter.ctld_health()   # {"ok": True, "via": "readyz", "url": "http://10.77.0.1:6817/readyz", "detail": "204"}
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burstd.config import SlurmConfig
    from burstd.slurm.features import Features

_PING_UP = re.compile(r"^Slurmctld\(primary\) at \S+ is UP", re.M)
_HOST_ADDR = re.compile(r"^[\w.-]+\(([\w.:-]+)\)$")  # vm(10.77.0.1): the address in brackets
_HOST = re.compile(r"^[\w.-]+$")


def ctld_url(config_text: str) -> str:
    """``scontrol show config`` -> the primary slurmctld's ``http://ADDR:PORT`` (pure)."""
    values: dict[str, str] = {}
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values.setdefault(key.strip(), value.strip())
    host = values.get("SlurmctldHost[0]", "")
    port = re.match(r"\d+", values.get("SlurmctldPort", ""))
    addr = values.get("SlurmctldAddr", "(null)")
    if addr in ("", "(null)"):
        m = _HOST_ADDR.match(host)
        addr = m.group(1) if m else host
    if not port or not (_HOST.match(addr) or _HOST_ADDR.match(f"x({addr})")):
        raise ValueError(f"no slurmctld host and port in `scontrol show config` (host {host!r})")
    if ":" in addr:
        addr = f"[{addr}]"  # IPv6
    return f"http://{addr}:{port.group(0)}"


class NoHealthProbe:
    """Backends without a health probe of their own (rest, pyslurm): ``burstctl status`` shows none."""

    def ctld_health(self) -> dict[str, Any] | None:
        return None


class HealthMixin:
    """slurmctld's health for the cli backend (needs ``run``, ``features`` and ``config`` of the adapter)."""

    if TYPE_CHECKING:  # what this needs of the adapter: ``CliAdapter``'s own, which mypy checks against these
        config: SlurmConfig

        @property
        def features(self) -> Features: ...

        def run(self, cmd: str, args: Sequence[str]) -> str: ...

    _ctld_url: str | None = None

    def ctld_health(self) -> dict[str, Any]:
        """``{"ok", "via", "detail"}`` (+ ``url`` with /readyz): never raises for a slurmctld that is down."""
        from burstd.slurm.base import SlurmError

        timeout = min(float(self.config.command_timeout_s), 5.0)
        try:
            via = "readyz" if self.features.has("ctld_http") else "scontrol ping"
        except SlurmError as exc:  # not even `squeue --version` answers
            return {"ok": False, "via": "version", "detail": str(exc)}
        try:
            if via == "scontrol ping":
                out = self.run("scontrol", ["ping"])
                return {"ok": bool(_PING_UP.search(out)), "via": via, "detail": out.strip()}
            if self._ctld_url is None:
                self._ctld_url = ctld_url(self.run("scontrol", ["show", "config"]))
        except (SlurmError, ValueError) as exc:  # `scontrol ping` exits 1 when slurmctld is DOWN
            return {"ok": False, "via": via, "detail": str(exc)}
        url = f"{self._ctld_url}/readyz"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a site's http_proxy
        try:
            with opener.open(url, timeout=timeout) as resp:
                return {"ok": 200 <= resp.status < 300, "via": via, "url": url, "detail": str(resp.status)}
        except urllib.error.HTTPError as exc:  # 5xx: running but not servicing RPCs
            return {"ok": False, "via": via, "url": url, "detail": f"{exc.code} {exc.reason}"}
        except (OSError, ValueError) as exc:
            return {"ok": False, "via": via, "url": url, "detail": str(exc)}
