"""An HTTP proxy in front of a moto server that injects what moto cannot do.

Real boto3 talks HTTP to the proxy; the proxy forwards to moto, and on the way:

* ``exhaust(instance_type, az[, market])``: CreateFleet answers ``InsufficientInstanceCapacity`` (in the fleet's
  ``errorSet``, as EC2 does) for that offering and launches from the remaining overrides, or from none;
* ``throttle(n, action)``: the next n calls answer HTTP 503 ``RequestLimitExceeded``;
* ``fail(n, action, code, status)``: the next n calls answer that error (auth, quota...);
* ``partial(n, keep=0, honour_min=True)``: the next n CreateFleet calls have capacity for only ``keep``
  instances. Like EC2, a fleet with ``MinTargetCapacity`` above that launches none and answers
  ``UnfulfillableCapacity``; ``honour_min=False`` hands out the ``keep`` anyway (an API answering less than
  its floor, which burstd must still never keep half of);
* ``drop_response(n, action)``: the call reaches moto but the answer is lost (a crash between call and reply);
* ``delay(seconds, n, action)``: slow answers;
* ``reclaim(instance_id)``: the instance disappears as a spot reclaim (state reason
  ``Server.SpotInstanceTermination``), through moto's own backend.

CreateFleet honours ``ClientToken`` like EC2 (moto does not): the same token returns the first answer, and
concurrent calls with one token are serialised. Every CreateFleet body is kept in ``fleet_requests``.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

ACCOUNT = "123456789012"


@dataclass
class _Rule:
    action: str | None
    remaining: int


@dataclass
class Faults:
    exhausted: dict[tuple[str, str, str | None], str] = field(default_factory=dict)  # (type, az, market) -> code
    throttles: list[_Rule] = field(default_factory=list)
    failures: list[tuple[_Rule, str, int]] = field(default_factory=list)
    partials: list[tuple[int, bool]] = field(default_factory=list)  # (keep, honour_min) per coming call
    drops: list[_Rule] = field(default_factory=list)
    delays: list[tuple[_Rule, float]] = field(default_factory=list)


def _take(rules: list, action: str, key=lambda r: r):
    for item in rules:
        rule = key(item)
        if rule.remaining > 0 and rule.action in (None, action):
            rule.remaining -= 1
            return item
    return None


def _error_xml(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


class Ec2FaultProxy:
    def __init__(self, moto_host: str, moto_port: int, region: str = "us-east-1"):
        self.moto = (moto_host, moto_port)
        self.region = region
        self.faults = Faults()
        self.fleet_requests: list[dict[str, str]] = []
        self.calls: list[str] = []
        self._lock = threading.Lock()
        self._token_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._token_answers: dict[str, tuple[int, bytes]] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                proxy._handle(self)

            def do_GET(self):
                proxy._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    # -- fault controls ------------------------------------------------------------------------------------

    def exhaust(self, instance_type: str, az: str, code: str = "InsufficientInstanceCapacity",
                market: str | None = None) -> None:
        """No capacity for this type in this AZ (for one market, "spot" / "on-demand", or both)."""
        with self._lock:
            self.faults.exhausted[(instance_type, az, market)] = code

    def throttle(self, n: int, action: str | None = None) -> None:
        with self._lock:
            self.faults.throttles.append(_Rule(action, n))

    def fail(self, n: int, action: str | None, code: str, status: int = 400) -> None:
        with self._lock:
            self.faults.failures.append((_Rule(action, n), code, status))

    def partial(self, n: int = 1, keep: int = 0, honour_min: bool = True) -> None:
        with self._lock:
            self.faults.partials.extend([(keep, honour_min)] * n)

    def drop_response(self, n: int, action: str | None = None) -> None:
        with self._lock:
            self.faults.drops.append(_Rule(action, n))

    def delay(self, seconds: float, n: int, action: str | None = None) -> None:
        with self._lock:
            self.faults.delays.append((_Rule(action, n), seconds))

    def reset(self) -> None:
        with self._lock:
            self.faults = Faults()
            self.fleet_requests.clear()
            self.calls.clear()
            self._token_answers.clear()

    def backend(self):
        from moto.backends import get_backend

        return get_backend("ec2")[ACCOUNT][self.region]

    def reclaim(self, instance_id: str) -> None:
        """Terminate as EC2 does when it takes a spot instance back."""
        from moto.ec2.models.instances import StateReason

        inst = self.backend().get_instance(instance_id)
        inst.terminate()
        inst.state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination", "Server.SpotInstanceTermination"
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- request path --------------------------------------------------------------------------------------

    def _reply(self, h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "text/xml") -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes, str]:
        conn = http.client.HTTPConnection(*self.moto, timeout=60)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        headers["Content-Length"] = str(len(body))
        conn.request(h.command, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        ctype = resp.getheader("Content-Type", "text/xml")
        conn.close()
        return resp.status, data, ctype

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        params = dict(parse_qsl(body.decode(), keep_blank_values=True))
        action = params.get("Action", "")
        with self._lock:
            self.calls.append(action)
            delay = _take(self.faults.delays, action, key=lambda d: d[0])
            throttle = _take(self.faults.throttles, action)
            failure = _take(self.faults.failures, action, key=lambda f: f[0])
            drop = _take(self.faults.drops, action)
        if delay:
            time.sleep(delay[1])
        if throttle:
            return self._reply(h, 503, _error_xml("RequestLimitExceeded", "Request limit exceeded."))
        if failure:
            return self._reply(h, failure[2], _error_xml(failure[1], f"injected {failure[1]}"))
        if action == "CreateFleet":
            status, data = self._create_fleet(h, body, params)
            ctype = "text/xml"
        else:
            status, data, ctype = self._forward(h, body)
        if drop:
            h.close_connection = True
            h.wfile.flush()
            h.connection.shutdown(2)  # the answer is lost; the work is done
            return
        self._reply(h, status, data, ctype)

    def _create_fleet(self, h, body: bytes, params: dict[str, str]) -> tuple[int, bytes]:
        token = params.get("ClientToken", "")
        lock = self._token_locks[token] if token else threading.Lock()
        with lock:
            if token and token in self._token_answers:
                return self._token_answers[token]
            with self._lock:
                self.fleet_requests.append(params)
            answer = self._create_fleet_once(h, body, params)
            if token and answer[0] == 200:
                self._token_answers[token] = answer
            return answer

    def _create_fleet_once(self, h, body: bytes, params: dict[str, str]) -> tuple[int, bytes]:
        pairs = parse_qsl(body.decode(), keep_blank_values=True)
        over_re = re.compile(r"^LaunchTemplateConfigs\.(\d+)\.Overrides\.(\d+)\.(.+)$")
        overrides: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)
        rest: list[tuple[str, str]] = []
        for k, v in pairs:
            m = over_re.match(k)
            if m:
                overrides[(int(m[1]), int(m[2]))][m[3]] = v
            else:
                rest.append((k, v))
        lifecycle = params.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
        backend = self.backend()
        errors: list[str] = []
        kept: dict[int, list[dict[str, str]]] = defaultdict(list)
        with self._lock:
            exhausted = dict(self.faults.exhausted)
            partial = self.faults.partials.pop(0) if self.faults.partials else None
        for (cfg, _), ov in sorted(overrides.items()):
            az = ov.get("AvailabilityZone") or backend.get_subnet(ov["SubnetId"]).availability_zone
            itype = ov.get("InstanceType", "")
            code = exhausted.get((itype, az, lifecycle)) or exhausted.get((itype, az, None))
            if code:
                spec = "".join(
                    f"<{k[0].lower() + k[1:]}>{escape(v)}</{k[0].lower() + k[1:]}>" for k, v in ov.items()
                )
                errors.append(
                    f"<item><launchTemplateAndOverrides><overrides>{spec}</overrides></launchTemplateAndOverrides>"
                    f"<lifecycle>{lifecycle}</lifecycle><errorCode>{code}</errorCode>"
                    f"<errorMessage>There is no {lifecycle} capacity available that matches your request."
                    f"</errorMessage></item>"
                )
            else:
                kept[cfg].append(ov)
        options = "SpotOptions" if lifecycle == "spot" else "OnDemandOptions"
        floor = int(params.get(f"{options}.MinTargetCapacity", "0") or 0)
        if params.get(f"{options}.SingleAvailabilityZone") == "true":  # moto ignores it: keep the first AZ only
            az_of = lambda ov: ov.get("AvailabilityZone") or backend.get_subnet(ov["SubnetId"]).availability_zone
            first = next((az_of(ov) for ovs in kept.values() for ov in ovs), None)
            kept = defaultdict(list, {cfg: [ov for ov in ovs if az_of(ov) == first] for cfg, ovs in kept.items()})
        if partial is not None:
            keep, honour_min = partial
            if keep and (keep >= floor or not honour_min):
                rest = [(k, str(keep) if k == "TargetCapacitySpecification.TotalTargetCapacity" else v)
                        for k, v in rest]
            else:
                if floor > keep:
                    errors.append(f"<item><lifecycle>{lifecycle}</lifecycle><errorCode>UnfulfillableCapacity"
                                  f"</errorCode><errorMessage>Unable to fulfill the minimum target capacity "
                                  f"{floor}.</errorMessage></item>")
                kept = defaultdict(list)
        error_set = f"<errorSet>{''.join(errors)}</errorSet>" if errors else ""
        if not any(kept.values()):
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?><CreateFleetResponse '
                'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                f"<requestId>{uuid.uuid4()}</requestId><fleetId>fleet-{uuid.uuid4()}</fleetId>{error_set}"
                "<fleetInstanceSet/></CreateFleetResponse>"
            )
            return 200, xml.encode()
        new_pairs = list(rest)
        for cfg, ovs in kept.items():
            for j, ov in enumerate(ovs, start=1):
                new_pairs.extend((f"LaunchTemplateConfigs.{cfg}.Overrides.{j}.{k}", v) for k, v in ov.items())
        status, data, _ = self._forward(h, urlencode(new_pairs).encode())
        if status == 200 and error_set:
            data = data.replace(b"</CreateFleetResponse>", error_set.encode() + b"</CreateFleetResponse>")
        return status, data
