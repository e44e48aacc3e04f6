"""The watchers against the real local metadata server, over HTTP."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from burstd.agent.watchers import AwsImdsWatcher, GcpMetadataWatcher, WatchError
from burstd.domain.preemption import iso, parse_iso
from burstd.providers.local.metadata import (
    Identity,
    MetadataServer,
    announce_preemption,
    announce_rebalance,
    clear_notices,
    read_notice,
)


@pytest.fixture
def imds(tmp_path):
    """A real local metadata server on 127.0.0.1 (random port), its state dir in tmp_path."""
    srv = MetadataServer(
        tmp_path / "vm",
        Identity("i-local-cloud7", "cloud7", "10.77.0.107", {"burstd:lease": "L-7"}),
        "127.0.0.1",
        0,
    ).start()
    srv.wait_step_s = 0.02
    yield srv
    srv.stop()


def test_no_notice_means_no_notices_and_one_token_for_many_polls(imds):
    w = AwsImdsWatcher(imds.url, source="local")
    assert w.poll() == []
    assert w.poll() == []
    assert w.get_text("instance-id") == "i-local-cloud7"
    assert w.get_text("tags/instance/burstd:lease") == "L-7"
    assert w.get_text("no-such-key") is None
    assert imds.requests["/latest/meta-data/spot/instance-action"] == 2
    w.close()


def test_announced_interruption_is_seen_with_its_deadline(imds):
    w = AwsImdsWatcher(imds.url, source="local")
    deadline = announce_preemption(imds.state_dir, 90, now=1_900_000_000.4)
    assert deadline == 1_900_000_090.0
    [n] = w.poll()
    assert (n.kind, n.action, n.deadline, n.source) == ("interruption", "terminate", deadline, "local")
    # the same notice on the next poll: same identity, so the handler acts once
    assert w.poll()[0].key == n.key
    # announcing again never postpones the reclaim
    assert announce_preemption(imds.state_dir, 300, now=1_900_000_010) == deadline
    assert read_notice(imds.state_dir) == ("terminate", deadline)


def test_instance_action_body_has_the_aws_shape(imds):
    deadline = announce_preemption(imds.state_dir, 120, action="stop")
    with httpx.Client() as c:
        tok = c.put(
            imds.url + "/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "30"}
        ).text
        r = c.get(
            imds.url + "/latest/meta-data/spot/instance-action", headers={"X-aws-ec2-metadata-token": tok}
        )
    assert r.status_code == 200
    assert json.loads(r.text) == {"action": "stop", "time": iso(deadline)}
    assert parse_iso(json.loads(r.text)["time"]) == deadline


def test_rebalance_recommendation_is_a_separate_notice(imds):
    w = AwsImdsWatcher(imds.url)
    at = announce_rebalance(imds.state_dir)
    [n] = w.poll()
    assert (n.kind, n.action, n.deadline) == ("rebalance", "rebalance", at)
    announce_preemption(imds.state_dir, 60)
    assert sorted(x.kind for x in w.poll()) == ["interruption", "rebalance"]
    clear_notices(imds.state_dir)
    assert w.poll() == []


def test_imdsv2_refuses_get_without_token_and_put_without_ttl(imds):
    with httpx.Client() as c:
        assert c.get(imds.url + "/latest/meta-data/instance-id").status_code == 401
        assert (
            c.get(
                imds.url + "/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": "forged"}
            ).status_code
            == 401
        )
        assert c.put(imds.url + "/latest/api/token").status_code == 400
        assert (
            c.put(
                imds.url + "/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "99999"}
            ).status_code
            == 400
        )


def test_token_refused_after_a_metadata_restart_is_renewed(tmp_path):
    ident = Identity("i-1", "cloud1")
    srv = MetadataServer(tmp_path, ident, "127.0.0.1", 0).start()
    port = srv.server_address[1]
    w = AwsImdsWatcher(srv.url, retries=5)
    assert w.poll() == []
    srv.stop()  # a restarted service knows none of the old tokens
    srv = MetadataServer(tmp_path, ident, "127.0.0.1", port).start()
    try:
        announce_preemption(tmp_path, 30)
        [n] = w.poll()
        assert n.kind == "interruption"
    finally:
        srv.stop()


def test_unreachable_service_raises_watch_error_after_retries(imds):
    url = imds.url
    imds.stop()
    w = AwsImdsWatcher(url, retries=2, timeout_s=0.5)
    w.backoff_s = 0.01
    with pytest.raises(WatchError, match="unreadable"):
        w.poll()


def test_server_errors_are_retried_then_succeed():
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if request.method == "PUT":
            return httpx.Response(200, text="tok")
        if calls["n"] < 4:
            return httpx.Response(503, text="busy")
        return httpx.Response(404)

    w = AwsImdsWatcher("http://imds", retries=3, client=httpx.Client(transport=httpx.MockTransport(handler)))
    w.backoff_s = 0.0
    assert w.poll() == []
    assert calls["n"] >= 4


def test_gcp_watcher_long_polls_until_preempted(imds):
    clock = [1_900_000_000.0]
    w = GcpMetadataWatcher(imds.url, notice_s=30, wait_s=10, clock=lambda: clock[0])
    assert w.poll() == []  # first call answers at once with FALSE
    threading.Timer(0.3, announce_preemption, args=(imds.state_dir, 30)).start()
    t0 = time.monotonic()
    [n] = w.poll()  # waits for the change
    assert 0.2 < time.monotonic() - t0 < 5
    assert (n.kind, n.action, n.deadline, n.source) == ("interruption", "terminate", 1_900_000_030.0, "gcp")
    clock[0] += 12
    assert w.poll()[0].deadline == n.deadline  # the deadline is fixed when first seen


def test_gcp_needs_metadata_flavor_header(imds):
    with httpx.Client() as c:
        assert c.get(imds.url + "/computeMetadata/v1/instance/preempted").status_code == 403
        r = c.get(imds.url + "/computeMetadata/v1/instance/preempted", headers={"Metadata-Flavor": "Google"})
    assert r.text == "FALSE" and r.headers["ETag"]
