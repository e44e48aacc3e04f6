"""Watchers of a cloud's metadata service: each ``poll()`` returns the notices standing right now.

    w = AwsImdsWatcher("http://169.254.169.254")
    for notice in w.poll():          # [] most of the time
        print(notice.kind, notice.action, notice.deadline)

* ``AwsImdsWatcher``: IMDSv2 (a session token from ``PUT latest/api/token``, renewed before it expires or
  when refused), ``latest/meta-data/spot/instance-action`` (404 = no notice) and
  ``latest/meta-data/events/recommendations/rebalance``. The local provider serves the same shapes.
* ``GcpMetadataWatcher``: ``computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``,
  long-polled with ``wait_for_change=true`` and ``last_etag`` (the server answers the moment the value changes,
  or at once if it already differs from the ETag seen); GCP gives no time, so the deadline is first-seen + 30 s.

``next_poll_in(interval)`` tells the agent how long to wait before the next ``poll()``: the interval for IMDS
(which has no long poll), nothing for a GCP long poll that ran its course (the server did the waiting).

Connection errors, timeouts and 5xx are retried a few times inside one poll, then raised as
``WatchError`` (the agent logs it and polls again next interval).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Protocol

import httpx

from burstd.domain.preemption import Notice, parse_iso

log = logging.getLogger("burstd.agent")

AWS_DEFAULT_URL = "http://169.254.169.254"
GCP_DEFAULT_URL = "http://metadata.google.internal"
LOCAL_DEFAULT_URL = "http://169.254.169.254:1338"


class WatchError(Exception):
    """The metadata service could not be read this poll (after retries)."""


class Watcher(Protocol):
    source: str
    base_url: str  # named in the agent's start-up log line

    def poll(self) -> list[Notice]: ...

    def identity(self, audience: str) -> dict[str, str]: ...

    def next_poll_in(self, interval_s: float) -> float: ...

    def close(self) -> None: ...


class _HttpWatcher:
    source = "?"

    def __init__(self, base_url: str, *, timeout_s: float, retries: int, client: httpx.Client | None):
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff_s = 0.2
        self._own = client is None
        # transport retries cover refused connections; _request below also retries timeouts and 5xx
        self.client = client or httpx.Client(
            timeout=httpx.Timeout(timeout_s), transport=httpx.HTTPTransport(retries=1), trust_env=False
        )

    def close(self) -> None:
        if self._own:
            self.client.close()

    def next_poll_in(self, interval_s: float) -> float:
        return interval_s

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * attempt)
            try:
                r = self.client.request(method, self.base_url + path, **kw)
            except httpx.TransportError as exc:
                last = exc
                continue
            if r.status_code >= 500:
                last = WatchError(f"{method} {path}: HTTP {r.status_code}")
                continue
            return r
        raise WatchError(f"{self.source} metadata at {self.base_url} unreadable: {method} {path}: {last}")


class AwsImdsWatcher(_HttpWatcher):
    """AWS IMDSv2 (and the local provider's copy of it)."""

    TOKEN_PATH = "/latest/api/token"
    ACTION_PATH = "/latest/meta-data/spot/instance-action"
    REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"

    def __init__(
        self,
        base_url: str = AWS_DEFAULT_URL,
        *,
        token_ttl_s: int = 21600,
        timeout_s: float = 2.0,
        retries: int = 3,
        source: str = "aws",
        client: httpx.Client | None = None,
    ):
        super().__init__(base_url, timeout_s=timeout_s, retries=retries, client=client)
        self.source = source
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._token_expires = 0.0

    def _get_token(self, *, renew: bool = False) -> str:
        now = time.monotonic()
        # renew when less than a tenth of the lifetime (at most a minute) is left
        margin = min(60.0, self.token_ttl_s / 10)
        if renew or self._token is None or now >= self._token_expires - margin:
            r = self._request(
                "PUT",
                self.TOKEN_PATH,
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)},
            )
            if r.status_code != 200:
                raise WatchError(f"IMDSv2 token refused: HTTP {r.status_code} {r.text[:200]}")
            self._token, self._token_expires = r.text.strip(), now + self.token_ttl_s
        return self._token

    def _get(self, path: str) -> httpx.Response:
        r = self._request("GET", path, headers={"X-aws-ec2-metadata-token": self._get_token()})
        if r.status_code == 401:  # token expired or the service restarted: one fresh token, one retry
            r = self._request("GET", path, headers={"X-aws-ec2-metadata-token": self._get_token(renew=True)})
        if r.status_code not in (200, 404):
            raise WatchError(f"GET {path}: HTTP {r.status_code} {r.text[:200]}")
        return r

    def get_text(self, key: str) -> str | None:
        """A plain metadata value (``instance-id``, ``local-ipv4``...), or None when absent."""
        r = self._get("/latest/meta-data/" + key)
        return r.text if r.status_code == 200 else None

    def identity(self, audience: str) -> dict[str, str]:
        """This instance's signed identity document, for ``POST /v1/enroll`` (AWS signs no audience)."""
        found = {k: self._get(f"/latest/dynamic/instance-identity/{k}") for k in ("document", "signature")}
        missing = [k for k, r in found.items() if r.status_code != 200]
        if missing:
            raise WatchError(f"{self.source} metadata has no instance identity {' or '.join(missing)}")
        return {"cloud": "aws", "document": found["document"].text, "signature": found["signature"].text.strip()}

    def poll(self) -> list[Notice]:
        notices: list[Notice] = []
        r = self._get(self.ACTION_PATH)
        if r.status_code == 200:
            try:
                data = json.loads(r.text)
                notices.append(_checked(Notice("interruption", str(data["action"]), parse_iso(data["time"]),
                                               self.source)))
            except (ValueError, KeyError, TypeError) as exc:
                raise WatchError(f"malformed spot/instance-action {r.text[:200]!r}: {exc}") from None
        r = self._get(self.REBALANCE_PATH)
        if r.status_code == 200:
            try:
                data = json.loads(r.text)
                notices.append(_checked(Notice("rebalance", "rebalance", parse_iso(data["noticeTime"]), self.source)))
            except (ValueError, KeyError, TypeError) as exc:
                raise WatchError(f"malformed rebalance recommendation {r.text[:200]!r}: {exc}") from None
        return notices


_ACTION = re.compile(r"^[a-z]{1,20}$")
_EARLIEST, _LATEST = 946_684_800.0, 4_102_444_800.0  # 2000-01-01 .. 2100-01-01


def _checked(notice: Notice) -> Notice:
    """A metadata answer becomes a Slurm drain reason: a plain action word and a real time, or ValueError."""
    if not _ACTION.fullmatch(notice.action):
        raise ValueError(f"action {notice.action[:40]!r} is not a plain word")
    if not _EARLIEST <= notice.deadline <= _LATEST:
        raise ValueError(f"time {notice.deadline!r} is not between 2000 and 2100")
    return notice


class GcpMetadataWatcher(_HttpWatcher):
    """GCP's metadata server: ``instance/preempted`` turns TRUE when the preemption notice starts."""

    PATH = "/computeMetadata/v1/instance/preempted"

    def __init__(
        self,
        base_url: str = GCP_DEFAULT_URL,
        *,
        notice_s: float = 30.0,
        wait_s: float = 60.0,
        timeout_s: float = 2.0,
        retries: int = 3,
        client: httpx.Client | None = None,
        clock=time.time,
    ):
        super().__init__(base_url, timeout_s=timeout_s, retries=retries, client=client)
        self.source = "gcp"
        self.notice_s = notice_s
        self.wait_s = wait_s
        self.timeout_s = timeout_s
        self.clock = clock
        self._etag: str | None = None
        self._first_seen: float | None = None
        self._at_once = False  # the next poll may start at once: it is a long poll the server paces

    def next_poll_in(self, interval_s: float) -> float:
        """0 when the next poll is a long poll and the last one was the first read, or was held by the server,
        or saw a change. Under a notice (the value stays TRUE: plain reads) and after a long poll that came back
        at once with nothing new (a server that ignores wait_for_change), the interval, so the agent never spins."""
        return 0.0 if self._at_once else interval_s

    def identity(self, audience: str) -> dict[str, str]:
        """A Google-signed token naming this instance, for ``audience`` (the daemon's URL), for
        ``POST /v1/enroll``."""
        r = self._request("GET", "/computeMetadata/v1/instance/service-accounts/default/identity",
                          params={"audience": audience, "format": "full"}, headers={"Metadata-Flavor": "Google"})
        if r.status_code != 200:
            raise WatchError(f"GCP metadata refused an identity token: HTTP {r.status_code} {r.text[:200]}")
        return {"cloud": "gcp", "token": r.text.strip()}

    def poll(self) -> list[Notice]:
        """The first call answers at once; later calls wait (up to ``wait_s``) for the value to change."""
        self._at_once = False
        params: dict[str, str] = {}
        timeout = httpx.Timeout(self.timeout_s)
        etag_seen = self._etag
        long_poll = etag_seen is not None and self._first_seen is None
        if etag_seen is not None and long_poll:
            params = {
                "wait_for_change": "true",
                "last_etag": etag_seen,
                "timeout_sec": str(int(self.wait_s)),
            }
            timeout = httpx.Timeout(self.timeout_s, read=self.wait_s + self.timeout_s + 5)
        started = time.monotonic()
        r = self._request(
            "GET", self.PATH, params=params, headers={"Metadata-Flavor": "Google"}, timeout=timeout
        )
        if r.status_code != 200:
            raise WatchError(f"GET {self.PATH}: HTTP {r.status_code} {r.text[:200]}")
        etag = r.headers.get("ETag")
        changed = etag is not None and etag != self._etag
        held = time.monotonic() - started >= min(1.0, self.wait_s / 2)
        preempted = r.text.strip().upper() == "TRUE"
        self._at_once = not preempted and self._first_seen is None and (not long_poll or changed or held)
        self._etag = etag or self._etag
        if preempted:
            if self._first_seen is None:
                self._first_seen = self.clock()
            return [
                Notice("interruption", "terminate", float(int(self._first_seen + self.notice_s)), self.source)
            ]
        return []


def make_watcher(cfg) -> Watcher:
    """The watcher for an ``AgentConfig``."""
    if cfg.provider == "gcp":
        return GcpMetadataWatcher(
            cfg.metadata_url or GCP_DEFAULT_URL,
            notice_s=cfg.gcp_notice_s,
            wait_s=cfg.gcp_wait_s,
            timeout_s=cfg.http_timeout_s,
            retries=cfg.http_retries,
        )
    default = LOCAL_DEFAULT_URL if cfg.provider == "local" else AWS_DEFAULT_URL
    return AwsImdsWatcher(
        cfg.metadata_url or default,
        token_ttl_s=cfg.token_ttl_s,
        timeout_s=cfg.http_timeout_s,
        retries=cfg.http_retries,
        source=cfg.provider,
    )
