"""A fake Compute Engine REST endpoint for the real google-cloud-compute client.

It speaks the shapes burstd uses: instances insert / bulkInsert (zonal and regional) / get / list /
aggregatedList / delete, and zone/region operations get / wait / list. EVERY request body is parsed into the
client library's own ``compute_v1`` message type with unknown fields rejected, so a malformed request fails the
test (the error is kept in ``malformed`` and answered 400). ``requestId`` must be a UUID and is honoured: the same
id returns the first operation. Operations start RUNNING and finish on the next get/wait.

Faults: ``exhaust(machine_type, zone, code)`` (ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS] in the operation),
``limit(machine_type, zone, k)`` (the zone holds only k live VMs of that type),
``quota(n)`` (QUOTA_EXCEEDED in the operation), ``rate_limit(n, kind)`` (HTTP 403 rateLimitExceeded),
``fail(n, kind, status, reason)``, ``drop_response(n, kind)`` (work done, answer lost), ``delay(s, n, kind)``,
``preempt(zone, name)`` (a spot reclaim: with DELETE the instance vanishes and a
``compute.instances.preempted`` operation is recorded; with STOP it goes TERMINATED).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

BASE = "https://www.googleapis.com/compute/v1"
_ids = itertools.count(1_000_000_000_000)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class _Rule:
    kind: str | None
    remaining: int


@dataclass
class GceFaults:
    exhausted: dict[tuple[str, str, str | None], str] = field(default_factory=dict)  # (type, zone, market) -> code
    limits: dict[tuple[str, str], int] = field(default_factory=dict)  # (machine type, zone) -> VMs it can hold
    quota: int = 0
    rate_limits: list[_Rule] = field(default_factory=list)
    failures: list[tuple[_Rule, int, str]] = field(default_factory=list)
    drops: list[_Rule] = field(default_factory=list)
    delays: list[tuple[_Rule, float]] = field(default_factory=list)


def _take(rules, kind, key=lambda r: r):
    for item in rules:
        rule = key(item)
        if rule.remaining > 0 and rule.kind in (None, kind):
            rule.remaining -= 1
            return item
    return None


class _HttpError(Exception):
    def __init__(self, status: int, message: str, reason: str = "invalid"):
        self.status, self.message, self.reason = status, message, reason


class FakeGce:
    def __init__(self):
        self.lock = threading.RLock()
        self.instances: dict[tuple[str, str, str], dict] = {}  # (project, zone, name) -> Instance JSON
        self.operations: dict[str, dict] = {}
        self.request_ids: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict | None]] = []  # (kind, path, parsed body as JSON)
        self.malformed: list[str] = []
        self.calls: list[str] = []
        self.created: list[dict] = []  # every instance ever created (a deleted one stays here)
        self.faults = GceFaults()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                fake._handle(self)

            def do_POST(self):
                fake._handle(self)

            def do_DELETE(self):
                fake._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # -- controls ------------------------------------------------------------------------------------------

    def reset(self) -> None:
        with self.lock:
            self.instances.clear()
            self.operations.clear()
            self.request_ids.clear()
            self.requests.clear()
            self.created.clear()
            self.malformed.clear()
            self.calls.clear()
            self.faults = GceFaults()

    def exhaust(self, machine_type: str, zone: str, code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
                market: str | None = None) -> None:
        """No capacity for this type in this zone (for one market, "spot" / "on-demand", or both)."""
        with self.lock:
            self.faults.exhausted[(machine_type, zone, market)] = code

    def _exhausted(self, mt: str, zone: str, market: str) -> str | None:
        return self.faults.exhausted.get((mt, zone, market)) or self.faults.exhausted.get((mt, zone, None))

    def limit(self, machine_type: str, zone: str, k: int) -> None:
        """``zone`` holds at most ``k`` live ``machine_type`` VMs: a bulkInsert whose minCount does not fit
        there fails with ZONE_RESOURCE_POOL_EXHAUSTED (or goes to another allowed zone with room)."""
        with self.lock:
            self.faults.limits[(machine_type, zone)] = k

    def quota(self, n: int = 1) -> None:
        with self.lock:
            self.faults.quota += n

    def rate_limit(self, n: int, kind: str | None = None) -> None:
        with self.lock:
            self.faults.rate_limits.append(_Rule(kind, n))

    def fail(self, n: int, kind: str | None, status: int, reason: str) -> None:
        with self.lock:
            self.faults.failures.append((_Rule(kind, n), status, reason))

    def drop_response(self, n: int, kind: str | None = None) -> None:
        with self.lock:
            self.faults.drops.append(_Rule(kind, n))

    def delay(self, seconds: float, n: int, kind: str | None = None) -> None:
        with self.lock:
            self.faults.delays.append((_Rule(kind, n), seconds))

    def live(self, project: str | None = None) -> list[dict]:
        with self.lock:
            return [dict(i) for (p, _, _), i in self.instances.items() if project in (None, p)
                    and i["status"] not in ("TERMINATED", "STOPPING")]

    def preempt(self, project: str, zone: str, name: str) -> None:
        with self.lock:
            inst = self.instances[(project, zone, name)]
            action = inst.get("scheduling", {}).get("instanceTerminationAction", "STOP")
            if action == "DELETE":
                del self.instances[(project, zone, name)]
            else:
                inst["status"] = "TERMINATED"
            op = self._new_op(project, "compute.instances.preempted", zone=zone, target=inst["selfLink"])
            op["status"] = "DONE"
            op["statusMessage"] = "Instance was preempted."

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- helpers -------------------------------------------------------------------------------------------

    def _new_op(self, project: str, op_type: str, *, zone: str | None = None, region: str | None = None,
                target: str = "") -> dict:
        name = f"operation-{uuid.uuid4().hex[:20]}"
        scope = f"zones/{zone}" if zone else f"regions/{region}"
        op = {
            "kind": "compute#operation", "id": str(next(_ids)), "name": name, "operationType": op_type,
            "status": "RUNNING", "progress": 0, "insertTime": _now(), "startTime": _now(), "targetLink": target,
            "selfLink": f"{BASE}/projects/{project}/{scope}/operations/{name}",
        }
        op["zone" if zone else "region"] = f"{BASE}/projects/{project}/{scope}"
        self.operations[name] = op
        return op

    @staticmethod
    def _finish(op: dict, errors: list[dict] | None = None, status_code: int = 0) -> None:
        op["_pending"] = {"errors": errors, "code": status_code}

    @staticmethod
    def _advance(op: dict) -> dict:
        pending = op.pop("_pending", None)
        if op["status"] != "DONE":
            op["status"], op["progress"], op["endTime"] = "DONE", 100, _now()
            if pending and pending["errors"]:
                op["error"] = {"errors": pending["errors"]}
                op["httpErrorStatusCode"] = pending["code"] or 400
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def _parse(self, kind: str, message_type, raw: bytes):
        try:
            msg = message_type.from_json(raw.decode() or "{}", ignore_unknown_fields=False)
        except Exception as exc:  # noqa: BLE001
            self.malformed.append(f"{kind}: {exc}")
            raise _HttpError(400, f"Invalid JSON payload for {kind}: {exc}") from None
        return msg, json.loads(raw.decode() or "{}")  # validated above; kept exactly as the client sent it

    def _request_id(self, query: dict) -> str | None:
        rid = (query.get("requestId") or [None])[0]
        if rid is not None:
            try:
                uuid.UUID(rid)
            except ValueError:
                self.malformed.append(f"requestId {rid!r} is not a UUID")
                raise _HttpError(400, f"Invalid value for field 'requestId': '{rid}'. Must be a UUID.") from None
        return rid

    def _make_instance(self, project: str, zone: str, name: str, props: dict) -> dict:
        mt = props.get("machineType", "")
        mt_url = mt if mt.startswith("http") else f"{BASE}/projects/{project}/zones/{zone}/machineTypes/{mt.split('/')[-1]}"
        n = len(self.instances) + 2
        return {
            "kind": "compute#instance", "id": str(next(_ids)), "name": name, "creationTimestamp": _now(),
            "zone": f"{BASE}/projects/{project}/zones/{zone}", "machineType": mt_url, "status": "RUNNING",
            "labels": dict(props.get("labels", {})), "metadata": props.get("metadata", {}),
            "scheduling": props.get("scheduling", {}), "disks": props.get("disks", []),
            "networkInterfaces": [{"network": (props.get("networkInterfaces") or [{}])[0].get("network", ""),
                                   "networkIP": f"10.128.{n // 250}.{n % 250 + 2}"}],
            "serviceAccounts": props.get("serviceAccounts", []),
            "selfLink": f"{BASE}/projects/{project}/zones/{zone}/instances/{name}",
        }

    def _matches(self, inst: dict, flt: str) -> bool:
        for key, value in re.findall(r'labels\.([A-Za-z0-9_-]+)\s*=\s*"?([^"\s)]*)"?', flt or ""):
            if inst.get("labels", {}).get(key) != value:
                return False
        m = re.search(r'status\s*=\s*"?([A-Z]+)"?', flt or "")
        if m and inst["status"] != m[1]:
            return False
        return True

    # -- handlers ------------------------------------------------------------------------------------------

    def _bulk_insert(self, project: str, zone: str | None, region: str | None, body: bytes, query) -> dict:
        kind = "bulkInsert"
        from google.cloud import compute_v1  # here, not at import: every xdist worker imports this file to collect

        msg, parsed = self._parse(kind, compute_v1.BulkInsertInstanceResource, body)
        rid = self._request_id(query)
        self.requests.append((kind, f"{project}/{zone or region}", parsed))
        if rid and rid in self.request_ids:
            return self.operations[self.request_ids[rid]]
        op = self._new_op(project, "bulkInsert", zone=zone, region=region)
        if rid:
            self.request_ids[rid] = op["name"]
        props = parsed.get("instanceProperties", {})
        mt = props.get("machineType", "").split("/")[-1]
        market = "spot" if props.get("scheduling", {}).get("provisioningModel") == "SPOT" else "on-demand"
        if zone:
            candidates = [zone]
        else:
            locs = parsed.get("locationPolicy", {}).get("locations", {})
            candidates = [k.split("/")[-1] for k, v in locs.items() if v.get("preference", "ALLOW") != "DENY"]
        if self.faults.quota > 0:
            self.faults.quota -= 1
            self._finish(op, [{"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded.  Limit: 8.0"}], 403)
            return op
        names = list(parsed.get("perInstanceProperties", {}).keys())
        if not names:
            raise _HttpError(400, "bulkInsert without perInstanceProperties names is not supported by the fake")
        count = int(parsed.get("count", len(names)))
        min_count = int(parsed.get("minCount", count))
        if not 1 <= min_count <= count <= len(names):
            raise _HttpError(400, f"bulkInsert: need 1 <= minCount ({min_count}) <= count ({count}) <= named "
                                  f"instances ({len(names)})")
        if taken := [n for n in names[:count] if any((project, z, n) in self.instances for z in candidates)]:
            self._finish(op, [{"code": "RESOURCE_ALREADY_EXISTS", "message": f"'{taken[0]}' already exists"}], 409)
            return op
        # Where the instances go: every one in one zone (a zonal call, or target shape ANY_SINGLE_ZONE), or
        # spread over the allowed zones in order (ANY, BALANCED). Fewer than minCount: none at all.
        single = zone is not None or parsed.get("locationPolicy", {}).get("targetShape") == "ANY_SINGLE_ZONE"
        if single:
            fits = [z for z in candidates if self._room(project, mt, z, market) >= min_count]
            plan = {fits[0]: min(count, self._room(project, mt, fits[0], market))} if fits else {}
        else:
            plan, want = {}, count
            for z in candidates:
                if want and (k := min(want, self._room(project, mt, z, market))):
                    plan[z], want = k, want - k
            plan = plan if sum(plan.values()) >= min_count else {}
        if not plan:
            code = (self._exhausted(mt, candidates[0], market) if candidates else None) \
                or "ZONE_RESOURCE_POOL_EXHAUSTED"
            self._finish(op, [{"code": code, "message": f"The zone does not have enough resources available to "
                                                          f"fulfill the request. {min_count} x '{mt}' in "
                                                          f"{', '.join(candidates)}"}], 503)
            return op
        todo = iter(names)
        for chosen, k in plan.items():
            for name in itertools.islice(todo, k):
                self.instances[(project, chosen, name)] = self._make_instance(project, chosen, name, props)
                self.created.append(self.instances[(project, chosen, name)])
        self._finish(op)
        return op

    def _room(self, project: str, mt: str, zone: str, market: str) -> int:
        """How many more ``mt`` VMs ``zone`` can hold: none when exhausted, the ``limit`` less the live ones."""
        if self._exhausted(mt, zone, market):
            return 0
        limit = self.faults.limits.get((mt, zone))
        if limit is None:
            return 1_000_000
        used = sum(1 for (p, z, _), i in self.instances.items() if p == project and z == zone
                   and i["machineType"].rsplit("/", 1)[-1] == mt and i["status"] != "TERMINATED")
        return max(0, limit - used)

    def _route(self, method: str, path: str, query, body: bytes):
        m = re.fullmatch(r"/compute/v1/projects/([^/]+)/(.*)", path)
        if not m:
            raise _HttpError(404, f"no such path {path}", "notFound")
        project, rest = m[1], m[2]
        if method == "POST" and (mm := re.fullmatch(r"zones/([^/]+)/instances/bulkInsert", rest)):
            return "bulkInsert", lambda: self._bulk_insert(project, mm[1], None, body, query)
        if method == "POST" and (mm := re.fullmatch(r"regions/([^/]+)/instances/bulkInsert", rest)):
            return "bulkInsert", lambda: self._bulk_insert(project, None, mm[1], body, query)
        if method == "POST" and (mm := re.fullmatch(r"zones/([^/]+)/instances", rest)):
            return "insert", lambda: self._insert(project, mm[1], body, query)
        if method == "GET" and (mm := re.fullmatch(r"zones/([^/]+)/instances/([^/]+)", rest)):
            return "get", lambda: self._get(project, mm[1], mm[2])
        if method == "DELETE" and (mm := re.fullmatch(r"zones/([^/]+)/instances/([^/]+)", rest)):
            return "delete", lambda: self._delete(project, mm[1], mm[2], query)
        if method == "GET" and (mm := re.fullmatch(r"zones/([^/]+)/instances", rest)):
            return "list", lambda: self._list(project, mm[1], query)
        if method == "GET" and rest == "aggregated/instances":
            return "aggregatedList", lambda: self._aggregated(project, query)
        if (mm := re.fullmatch(r"(zones|regions)/([^/]+)/operations/([^/]+?)(/wait)?", rest)) and method in ("GET", "POST"):
            return "operation", lambda: self._op(mm[3])
        if method == "GET" and (mm := re.fullmatch(r"(zones|regions)/([^/]+)/operations", rest)):
            return "operations", lambda: self._ops_list(project, mm[1], mm[2], query)
        raise _HttpError(404, f"no such path {path}", "notFound")

    def _insert(self, project, zone, body, query):
        from google.cloud import compute_v1

        msg, parsed = self._parse("insert", compute_v1.Instance, body)
        rid = self._request_id(query)
        self.requests.append(("insert", f"{project}/{zone}", parsed))
        if rid and rid in self.request_ids:
            return self.operations[self.request_ids[rid]]
        op = self._new_op(project, "insert", zone=zone)
        if rid:
            self.request_ids[rid] = op["name"]
        self.instances[(project, zone, parsed["name"])] = self._make_instance(project, zone, parsed["name"], parsed)
        self.created.append(self.instances[(project, zone, parsed["name"])])
        self._finish(op)
        return op

    def _get(self, project, zone, name):
        inst = self.instances.get((project, zone, name))
        if inst is None:
            raise _HttpError(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
                             "notFound")
        return inst

    def _delete(self, project, zone, name, query):
        rid = self._request_id(query)
        if rid and rid in self.request_ids:
            return self.operations[self.request_ids[rid]]
        self._get(project, zone, name)
        del self.instances[(project, zone, name)]
        op = self._new_op(project, "delete", zone=zone, target=f"{BASE}/projects/{project}/zones/{zone}/instances/{name}")
        if rid:
            self.request_ids[rid] = op["name"]
        self._finish(op)
        return op

    def _list(self, project, zone, query):
        flt = (query.get("filter") or [""])[0]
        items = [i for (p, z, _), i in self.instances.items() if p == project and z == zone and self._matches(i, flt)]
        return {"kind": "compute#instanceList", "id": f"projects/{project}/zones/{zone}/instances", "items": items}

    def _aggregated(self, project, query):
        flt = (query.get("filter") or [""])[0]
        out: dict[str, dict] = {}
        for (p, z, _), inst in self.instances.items():
            if p == project and self._matches(inst, flt):
                out.setdefault(f"zones/{z}", {"instances": []})["instances"].append(inst)
        return {"kind": "compute#instanceAggregatedList", "id": f"projects/{project}/aggregated/instances", "items": out}

    def _op(self, name):
        op = self.operations.get(name)
        if op is None:
            raise _HttpError(404, f"operation {name} not found", "notFound")
        return self._advance(op)

    def _ops_list(self, project, scope_kind, scope, query):
        flt = (query.get("filter") or [""])[0]
        want = re.search(r'operationType\s*=\s*"?([\w.]+)"?', flt)
        key = "zone" if scope_kind == "zones" else "region"
        items = [self._advance(o) if o["status"] == "DONE" else {k: v for k, v in o.items() if not k.startswith("_")}
                 for o in self.operations.values()
                 if o.get(key, "").endswith(f"/projects/{project}/{scope_kind}/{scope}")
                 and (not want or o["operationType"] == want[1])]
        return {"kind": "compute#operationList", "id": f"projects/{project}/{scope_kind}/{scope}/operations", "items": items}

    def _send(self, h, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=UTF-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlparse(h.path)
        query = parse_qs(url.query)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        try:
            kind, run = self._route(h.command, url.path, query, body)
        except _HttpError as e:
            return self._send(h, e.status, {"error": {"code": e.status, "message": e.message,
                                                      "errors": [{"message": e.message, "reason": e.reason}]}})
        with self.lock:
            self.calls.append(kind)
            delay = _take(self.faults.delays, kind, key=lambda d: d[0])
            limited = _take(self.faults.rate_limits, kind)
            failure = _take(self.faults.failures, kind, key=lambda f: f[0])
            drop = _take(self.faults.drops, kind)
        if delay:
            time.sleep(delay[1])
        if limited:
            msg = "Rate Limit Exceeded"
            return self._send(h, 403, {"error": {"code": 403, "message": msg, "errors": [
                {"message": msg, "domain": "usageLimits", "reason": "rateLimitExceeded"}]}})
        if failure:
            _, status, reason = failure
            return self._send(h, status, {"error": {"code": status, "message": f"injected {reason}",
                                                    "errors": [{"message": f"injected {reason}", "reason": reason}]}})
        try:
            with self.lock:
                result = run()
                if kind in ("bulkInsert", "insert", "delete"):
                    result = {k: v for k, v in result.items() if not k.startswith("_")}
        except _HttpError as e:
            return self._send(h, e.status, {"error": {"code": e.status, "message": e.message,
                                                      "errors": [{"message": e.message, "reason": e.reason}]}})
        if drop:
            h.close_connection = True
            h.connection.shutdown(2)
            return
        self._send(h, 200, result)


@dataclass
class GceEnv:
    fake: FakeGce
    project: str = "burstd-test"

    @property
    def url(self) -> str:
        return self.fake.url


@pytest.fixture(scope="session")
def gce_server():
    fake = FakeGce()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def gce_env(gce_server):
    gce_server.reset()
    yield GceEnv(gce_server)
    assert not gce_server.malformed, f"malformed requests reached the fake GCE: {gce_server.malformed}"
