"""The ``rest`` backend: slurmrestd through httpx, JWT auth, OpenAPI data versions v0.0.36 .. v0.0.45.

    adapter = RestAdapter(SlurmConfig(backend="rest", rest_url="http://127.0.0.1:6820"))
    snap = adapter.snapshot()     # GET jobs/, nodes/, partitions/: three requests whatever the queue size

The version is the one named in ``slurm.rest_version``, or the newest one the server lists in
``/openapi/v3`` (22.05 serves v0.0.36-38; 24.11 v0.0.40-42; 26.05 v0.0.42-45). ``rest_url`` is a TCP URL
or ``unix:/path/to/slurmrestd.sock``. Requests carry ``X-SLURM-USER-NAME`` / ``X-SLURM-USER-TOKEN``; the
token comes from ``slurm.rest_token_file`` or from ``scontrol token`` (renewed before it expires and once on
a 401). Actions the served version has no endpoint for raise SlurmError naming the version.
"""

from __future__ import annotations

import json as jsonlib  # `json` is request()'s body argument
import re
import time
from urllib.parse import quote
from pathlib import Path
from typing import Any

import httpx

from burstd.config import SlurmConfig
from burstd.domain.slurm import Snapshot
from burstd.slurm import parse
from burstd.slurm.accounting import NoSlurmdbd
from burstd.slurm.health import NoHealthProbe
from burstd.slurm.base import (PartitionEdits, PARTITION_RE, REQUEUE_START_GAP_S, SlurmError, check_name,
                               check_reason)
from burstd.slurm.cli import ADDRESS_RE, HeadScontrol, _hostlist, _job_id, _signal
from burstd.unix_http import unix_transport

SUPPORTED_VERSIONS = ("v0.0.36", "v0.0.37", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42",
                      "v0.0.43", "v0.0.44", "v0.0.45")
TOKEN_LIFESPAN_S = 3600
_VERSION_PATH = re.compile(r"^/slurm/(v0\.0\.\d+)/")


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.lstrip("v").split("."))


def newest_served(openapi_doc: dict[str, Any]) -> str:
    """The newest supported data version among the paths of an ``/openapi/v3`` document."""
    served = {m.group(1) for p in (openapi_doc.get("paths") or {}) if (m := _VERSION_PATH.match(p))}
    usable = sorted((v for v in served if v in SUPPORTED_VERSIONS), key=version_key)
    if not usable:
        raise SlurmError(f"slurmrestd serves none of {', '.join(SUPPORTED_VERSIONS)} (it lists {sorted(served)})")
    return usable[-1]


def _read_token_file(path: str) -> str:
    try:
        raw = Path(path).read_text().strip()
    except OSError as exc:
        raise SlurmError(f"cannot read slurm.rest_token_file {path!r}: {exc.strerror}") from None
    if raw.startswith("SLURM_JWT="):
        raw = raw.split("=", 1)[1]
    if not raw:
        raise SlurmError(f"slurm.rest_token_file {path!r} is empty")
    return raw


class RestAdapter(PartitionEdits, NoSlurmdbd, NoHealthProbe, HeadScontrol):
    """Slurm through slurmrestd; what slurmrestd has no call for (a partition's account lists, reservations, a
    hold with its reason: the cloud gate, ``burstd.daemon.cloud_gate``; the JWT) through the head's ``scontrol``,
    with the same argument checks as the cli backend."""

    backend = "rest"

    def __init__(self, config: SlurmConfig | None = None, *, client: httpx.Client | None = None) -> None:
        self.config = config or SlurmConfig(backend="rest")
        if self.config.rest_version and self.config.rest_version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"slurm.rest_version {self.config.rest_version!r} is not one of {', '.join(SUPPORTED_VERSIONS)}"
            )
        self._client = client or self._make_client()
        self._version = self.config.rest_version
        self._token: str | None = None
        self._token_expires = 0.0
        self.requests = 0  # tests count these: a snapshot costs three, whatever the queue size

    # ------------------------------------------------------------------ transport
    def _make_client(self) -> httpx.Client:
        url = self.config.rest_url
        timeout = httpx.Timeout(self.config.command_timeout_s)
        if url.startswith("unix:"):
            path = url[len("unix:") :]
            path = path[2:] if path.startswith("//") else path
            transport = unix_transport(path)
            return httpx.Client(transport=transport, base_url="http://slurmrestd", timeout=timeout)
        return httpx.Client(base_url=url, timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def _uses_token(self) -> bool:
        return bool(self.config.rest_token_file) or not self.config.rest_url.startswith("unix:")

    def _get_token(self, *, renew: bool = False) -> str:
        if self.config.rest_token_file:
            return _read_token_file(self.config.rest_token_file)
        if renew or self._token is None or time.time() > self._token_expires - 60:
            check_name("rest user", self.config.rest_user)
            out = self.run("scontrol", ["token", f"username={self.config.rest_user}", f"lifespan={TOKEN_LIFESPAN_S}"])
            m = re.search(r"SLURM_JWT=(\S+)", out)
            if not m:
                raise SlurmError(f"scontrol token printed no SLURM_JWT: {out.strip()[:200]!r}")
            self._token, self._token_expires = m.group(1), time.time() + TOKEN_LIFESPAN_S
        return self._token

    def _headers(self, renew: bool = False) -> dict[str, str]:
        if not self._uses_token():
            return {}
        return {"X-SLURM-USER-NAME": self.config.rest_user, "X-SLURM-USER-TOKEN": self._get_token(renew=renew)}

    def request(self, method: str, path: str, *, json: Any = None, params: dict | None = None) -> dict[str, Any]:
        what = f"slurmrestd {method} {path}"
        for attempt in (0, 1):
            self.requests += 1
            try:
                resp = self._client.request(method, path, json=json, params=params, headers=self._headers(attempt == 1))
            except httpx.HTTPError as exc:
                raise SlurmError(f"{what}: cannot reach slurmrestd at {self.config.rest_url}: {exc}") from None
            if resp.status_code == 401 and attempt == 0 and self._uses_token() and not self.config.rest_token_file:
                continue  # token expired or revoked: renew once
            break
        if resp.status_code == 401:
            raise SlurmError(f"{what}: 401 unauthorized (check the JWT for user {self.config.rest_user!r})")
        try:  # leniently, as the cli backend: one job named with invalid UTF-8 must not hide the whole queue
            doc = jsonlib.loads(parse.decode_output(resp.content))
        except ValueError:
            raise SlurmError(f"{what}: HTTP {resp.status_code}, not JSON: {resp.text[:200]!r}") from None
        except RecursionError:
            raise SlurmError(f"{what}: HTTP {resp.status_code}, JSON nested too deeply") from None
        errors = [e for e in (doc.get("errors") or []) if e] if isinstance(doc, dict) else []
        if resp.status_code >= 400 or errors:
            detail = "; ".join(
                str(e.get("description") or e.get("error") or e) if isinstance(e, dict) else str(e) for e in errors
            )
            raise SlurmError(f"{what}: HTTP {resp.status_code}: {detail or resp.text[:200]}")
        if not isinstance(doc, dict):
            raise SlurmError(f"{what}: expected a JSON object")
        return doc

    # ------------------------------------------------------------------ version
    @property
    def version(self) -> str:
        if self._version is None:
            self._version = newest_served(self.request("GET", "/openapi/v3"))
        return self._version

    @property
    def _old(self) -> bool:
        """v0.0.36..38 (Slurm 22.05): no trailing slash, flat records, fewer endpoints."""
        return version_key(self.version) < (0, 0, 39)

    def _path(self, name: str) -> str:
        return f"/slurm/{self.version}/{name}" + ("" if self._old else "/")

    def _unsupported(self, action: str) -> SlurmError:
        return SlurmError(
            f"slurmrestd {self.version} has no endpoint to {action}; use slurm.backend = \"cli\" for this action"
        )

    # ------------------------------------------------------------------ reading
    def snapshot(self) -> Snapshot:
        taken = time.time()
        docs = [
            ("jobs", self.request("GET", self._path("jobs"))),
            ("nodes", self.request("GET", self._path("nodes"))),
            ("partitions", self.request("GET", self._path("partitions"))),
        ]
        snap = parse.snapshot_from_docs(docs, taken_at=taken, source="rest")
        return snap

    # ------------------------------------------------------------------ job actions
    def _job_partitions(self, job_id: int) -> list[str]:
        doc = self.request("GET", f"/slurm/{self.version}/job/{_job_id(job_id)}")
        jobs = [j for j in parse.jobs_from_doc(doc) if j.job_id == job_id]
        if not jobs:
            raise SlurmError(f"job {job_id} is not known to slurmrestd")
        return list(jobs[0].partitions)

    def set_partitions(self, job_id: int, partitions: list[str]) -> None:
        if not partitions:
            raise ValueError("a job needs at least one partition")
        names = [check_name("partition", p, PARTITION_RE) for p in partitions]
        body = {"partition": ",".join(dict.fromkeys(names))}
        self.request("POST", f"/slurm/{self.version}/job/{_job_id(job_id)}", json=body)

    def requeue(self, job_id: int, *, expedite: bool = False) -> None:
        # the endpoint exists from data version v0.0.45 (Slurm 26.05), as a GET (see its OpenAPI spec)
        if version_key(self.version) < (0, 0, 45):
            raise self._unsupported("requeue a job")
        self.request("GET", f"/slurm/{self.version}/job/{_job_id(job_id)}/requeue")
        if expedite:  # start again at once, not after cred_expire (as `scontrol update starttime=now`)
            self.start_now(job_id)

    def start_now(self, job_id: int) -> None:
        self.request("POST", f"/slurm/{self.version}/job/{_job_id(job_id)}", json={"begin_time": {
            "set": True, "infinite": False, "number": int(time.time()) + REQUEUE_START_GAP_S}})

    def release_hold(self, job_id: int) -> None:
        raise self._unsupported("release a held job")

    def job_state(self, job_id: int) -> str | None:
        try:
            data = self.request("GET", f"/slurm/{self.version}/job/{_job_id(job_id)}")
        except SlurmError:
            return None
        for job in data.get("jobs") or []:
            if str(job.get("job_id")) == str(job_id):
                state, _flags = parse.split_job_state(job.get("job_state"))
                return state or None
        return None

    def signal(self, job_id: int, signal: str, *, batch: bool = False, full: bool = False) -> None:
        params: dict[str, str] = {"signal": _signal(signal)}
        if batch or full:
            if self._old:
                raise self._unsupported("signal only the batch step or all steps")
            params["flags"] = "BATCH_JOB" if batch else "FULL_JOB"
        self.request("DELETE", f"/slurm/{self.version}/job/{_job_id(job_id)}", params=params)

    # ------------------------------------------------------------------ node actions
    def _update_node(self, nodes: list[str], body: dict[str, Any], action: str) -> None:
        if self._old:
            raise self._unsupported(action)
        _hostlist(nodes)  # validates every item
        for expr in [nodes] if isinstance(nodes, str) else nodes:
            self.request("POST", f"/slurm/{self.version}/node/{quote(expr, safe='')}", json=body)

    def drain(self, nodes: list[str], reason: str) -> None:
        if not reason.strip():
            raise ValueError("draining a node needs a reason")
        self._update_node(nodes, {"state": ["DRAIN"], "reason": check_reason(reason)}, "drain nodes")

    def resume(self, nodes: list[str]) -> None:
        self._update_node(nodes, {"state": ["RESUME"]}, "resume nodes")

    def clear_reason(self, nodes: list[str]) -> None:
        self._update_node(nodes, {"reason": ""}, "clear node reasons")

    def power_down(self, nodes: list[str], *, force: bool = False, reason: str = "") -> None:
        body: dict[str, Any] = {"state": ["POWER_DOWN_FORCE" if force else "POWER_DOWN_ASAP"]}
        if reason:
            body["reason"] = check_reason(reason)
        self._update_node(nodes, body, "power nodes down")

    def power_up(self, nodes: list[str]) -> None:
        self._update_node(nodes, {"state": ["POWER_UP"]}, "power nodes up")

    def set_instance(self, node: str, instance_id: str, instance_type: str) -> bool:
        """No data version up to v0.0.45 can set a node's instance id/type: use the cli backend for it."""
        check_name("node", node)
        return False

    def set_node_address(self, node: str, address: str, hostname: str | None = None) -> None:
        check_name("node", node)
        if not ADDRESS_RE.fullmatch(address):
            raise ValueError(f"invalid node address {address!r}")
        body: dict[str, Any] = {"address": [address]}
        if hostname is not None:
            body["hostname"] = [check_name("hostname", hostname)]
        self._update_node([node], body, "set a node address")
