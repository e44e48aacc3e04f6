"""schemathesis over the control API's own OpenAPI schema: every operation, generated and mutated requests, as
an admin peer (the most any caller can reach) and as a reader. No request may give a 5xx or a response the
schema does not allow; a reader's mutating call is always refused. The API runs on a real SQLite Store behind
the same gate (``burstd.api.auth.Gate``) the daemon serves; Slurm and the cloud are fakes. Bounded: ``EXAMPLES``
cases an operation (``BURSTD_FUZZ_EXAMPLES`` raises it)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import schemathesis
from hypothesis import HealthCheck, settings

from burstd.config import parse_config
from burstd.api.app import create_app
from burstd.api.server import _PeerApp
from burstd.api.auth import Gate
from burstd.daemon.reconcile import Reconciler
from burstd.db.store import Store
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider
from tests.unit.daemon.first_rule import first_rule

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "25"))
STATE = tempfile.mkdtemp(prefix="burstd-schemathesis-")  # the schema is loaded at collection: one dir a run
atexit.register(shutil.rmtree, STATE, True)
ROOT, NOBODY = (1, 0, 0), (1, 65534, 65534)  # (pid, uid, gid) as SO_PEERCRED gives them


def _app(peer):
    cfg = parse_config({
        "api": {"socket": f"{STATE}/unused.sock", "socket_group": "nogroup", "max_body_bytes": 65536},
        "daemon": {"state_dir": STATE},
        "database": {"url": f"sqlite:///{STATE}/burstd-{peer[1]}.db"},
        "budget": {"default_account_usd": 100},
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
    })
    clock = FakeClock()
    rec = Reconciler(cfg, Store.open(cfg.database.url), FakeAdapter(), {"local": FakeProvider("local", clock)},
                     first_rule, clock=clock)
    rec.cycle()  # a snapshot to explain from
    app = create_app(rec, cfg)
    return _PeerApp(Gate(app, app.state.access, cfg.api.max_body_bytes), peer)


admin_schema = schemathesis.openapi.from_asgi("/openapi.json", _app(ROOT))
reader_schema = schemathesis.openapi.from_asgi("/openapi.json", _app(NOBODY))
BOUNDED = settings(max_examples=EXAMPLES, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                          HealthCheck.data_too_large])


@admin_schema.parametrize()
@BOUNDED
def test_no_request_breaks_the_api(case):
    """Never a 500: a refusal (4xx) or a deliberate, explained 503 (database busy) at worst."""
    response = case.call()
    assert response.status_code not in (500, 502, 504), (case.method, case.path, response.text[:300])
    if response.status_code >= 400:
        assert response.json().get("detail"), (case.method, case.path, response.text[:300])


# POST /v1/enroll is open to anyone and changes nothing (a node's proof is its credential; its own tests:
# tests/unit/daemon/test_enroll.py, tests/adversarial/test_fuzz_node_identity.py)
@reader_schema.exclude(method="GET").exclude(path="/v1/enroll").parametrize()
@BOUNDED
def test_a_reader_never_changes_anything(case):
    response = case.call()
    assert response.status_code == 403, (case.method, case.path, response.status_code, response.text[:200])
