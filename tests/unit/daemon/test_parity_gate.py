"""The parity gate, daemon side and agent side: a node that differs from the on-prem reference fails its lease
with the difference as the reason (slurmd never registered), its jobs go back to the queue, and repeated refusals
protect the pool. Over the real API (TLS, the node's own agent token) with the agent's real gate code; the node's
fingerprint is given, not measured (the probes have their own tests)."""

from __future__ import annotations

import json

import pytest

from burstd.agent.gate import DIFFERS, MATCHES, UNREACHABLE, run_gate
from burstd.config import AgentConfig
from burstd.daemon.actions import Fail, Intent
from burstd.daemon.client import ApiClient, post_unix_json
from burstd.daemon.planning import plan_intents
from burstd.domain.lease import Lease, LeaseState
from burstd.domain.parity import compare, reason
from burstd.domain.slurm import Job, Node, Snapshot
from tests.unit.daemon.test_api_auth import serving
from tests.unit.daemon.test_pool_health import make
from tests.unit.daemon.test_daemon_reconcile import CFG

S = LeaseState
REFERENCE = {"slurm.release": "22.05.8", "munge.version": "0.5.15", "python.package.numpy": "1.26.4"}
NODE_24 = dict(REFERENCE, **{"slurm.release": "24.11.5"})
WHY = reason(compare(REFERENCE, NODE_24))


def test_plan_a_parity_refusal_fails_a_booting_lease_and_brings_its_jobs_back():
    lease = Lease("L1", "local", "cloud1", S.BOOTING, created_at=1.0, state_since=1.0, job_ids=(5,))
    job = Job(9, "j", "u", "a", ("cloud",), "CONFIGURING", nodes="cloud1")
    snap = Snapshot(taken_at=2.0, nodes=(Node("cloud1", "IDLE", ("CLOUD", "POWERING_UP")),), jobs=(job,))
    assert plan_intents([Intent("parity", "cloud1", WHY)], [lease], snap) == [Fail("L1", WHY, requeue=(5, 9))]
    for state in (S.READY, S.DRAINING, S.TERMINATING, S.FAILED):  # only a node that has not joined Slurm yet
        assert plan_intents([Intent("parity", "cloud1", WHY)], [Lease("L1", "local", "cloud1", state)], snap) == []


def test_repeated_parity_refusals_fail_each_lease_with_the_difference_and_protect_the_pool():
    cfg = CFG.model_copy(update={"cloud": CFG.cloud.model_copy(update={"protect_after_boot_failures": 2})})
    clock, store, adapter, provider, rec = make(cfg)
    for i, node in enumerate(["cloud1", "cloud2"]):
        rec.intake.request_resume([node], {node: (i + 1,)})
        rec.cycle()
        assert next(x for x in store.leases() if x.node_name == node).state == S.BOOTING
        # the job it was started for waits on the node (CONFIGURING) while the node boots
        adapter.jobs = [Job(i + 1, "j", "u", "a", ("cloud",), "CONFIGURING", nodes=node)]
        rec.intake.add_intent("parity", [node], WHY)  # what POST /v1/parity queues
        rec.cycle()
        rec.cycle()
        lease = next(x for x in store.leases() if x.node_name == node)
        assert lease.state in (S.FAILED, S.TERMINATING, S.TERMINATED)
        assert any(e.reason == WHY for e in store.events(lease.lease_id)) or WHY in lease.reason
        assert ("requeue", i + 1) in [c[:2] for c in adapter.calls]
    health = rec.health.status()["local"]
    assert health["protected"] and "slurmd 24.11.5 on the node, 22.05.8 on-prem" in health["protected_reason"]
    provider.launch_calls.clear()
    rec.intake.request_resume(["cloud3"])
    rec.cycle()
    assert next(x for x in store.leases() if x.node_name == "cloud3").state == S.REFUSED
    assert provider.launch_calls == []  # a bad image is not relaunched in a loop


def test_a_local_image_vm_refused_within_its_launch_counts_as_a_cloud_agents_report_would():
    """The local provider's image VM runs its gate within the launch call (ParityRefusedError): the daemon does
    what POST /v1/parity does for a cloud node: the lease fails with the differences, the job goes back to the
    queue, the refusal is counted, and repeated ones protect the pool (not a launch failure's cooldown)."""
    from burstd.providers.base import ParityRefusedError

    cfg = CFG.model_copy(update={"cloud": CFG.cloud.model_copy(update={"protect_after_boot_failures": 2})})
    clock, store, adapter, provider, rec = make(cfg)
    differences = ["slurmd 24.11.5 on the node, 22.05.8 on-prem", "munge 0.5.16 on the node, 0.5.15 on-prem"]
    for i, node in enumerate(["cloud1", "cloud2"]):
        provider.raise_next = ParityRefusedError(f"sl-{node}: the parity gate refused the image", differences)
        rec.intake.request_resume([node], {node: (i + 1,)})
        rec.cycle()
        rec.cycle()
        lease = next(x for x in store.leases() if x.node_name == node)
        assert lease.state in (S.FAILED, S.TERMINATING, S.TERMINATED)
        why = "parity: slurmd 24.11.5 on the node, 22.05.8 on-prem; munge 0.5.16 on the node, 0.5.15 on-prem"
        assert any(e.reason == why for e in store.events(lease.lease_id)), store.events(lease.lease_id)
        assert ("remove_partition", i + 1, "cloud") not in adapter.calls  # it may burst again, as from a cloud
    assert rec.metrics.registry.get_sample_value("burstd_parity_refusals_total", {"pool": "local"}) == 2.0
    health = rec.health.status()["local"]
    assert health["protected"] and "slurmd 24.11.5 on the node" in health["protected_reason"]
    provider.launch_calls.clear()
    rec.intake.request_resume(["cloud3"])
    rec.cycle()
    assert next(x for x in store.leases() if x.node_name == "cloud3").state == S.REFUSED
    assert provider.launch_calls == []


@pytest.fixture
def gate_api(tmp_path):
    ref = tmp_path / "reference.json"
    ref.write_text(json.dumps(REFERENCE))
    parity = {"reference_file": str(ref), "allow": ["python.package.*"],
              "checks": [{"name": "lustre", "argv": ["lfs", "--version"]}]}
    with serving(tmp_path, {"parity": parity}) as served:
        post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud2"})
        with ApiClient(served.config.api.socket) as api:
            token = api.post("/v1/nodes/cloud2/agent-token")["token"]
        (tmp_path / "agent.token").write_text(token)
        (tmp_path / "agent.token").chmod(0o600)
        served.token = token
        served.agent = AgentConfig(daemon_url=served.url, daemon_token_file=str(tmp_path / "agent.token"),
                                   daemon_ca_file=served.ca, node_name="cloud2")
        yield served


def _measured(facts):
    seen = {}

    def measure(*, job_python, checks):
        seen.update(job_python=job_python, checks=[c.name for c in checks])
        return dict(facts)

    return measure, seen


def test_a_node_on_another_release_is_refused_and_its_lease_gets_the_difference(gate_api):
    measure, seen = _measured(dict(NODE_24, **{"python.package.numpy": "2.0.0"}))  # numpy: allowed by the site
    assert run_gate(gate_api.agent, "cloud2", measure=measure) == DIFFERS
    assert seen == {"job_python": "/usr/bin/python3", "checks": ["lustre"]}  # the daemon's settings reached it
    [intent] = [i for i in gate_api.store_.intents() if i.kind == "parity"]
    assert intent.node == "cloud2" and intent.reason == "parity: slurmd 24.11.5 on the node, 22.05.8 on-prem"
    registry = gate_api.reconciler.metrics.registry
    assert registry.get_sample_value("burstd_parity_refusals_total", {"pool": "local"}) == 1.0


def test_a_matching_node_passes_and_nothing_is_reported(gate_api):
    measure, _ = _measured(dict(REFERENCE, **{"gpu.model": "Tesla T4"}))  # more than on-prem is fine
    assert run_gate(gate_api.agent, "cloud2", measure=measure) == MATCHES
    assert [i for i in gate_api.store_.intents() if i.kind == "parity"] == []


def test_an_agent_reports_for_its_own_node_only_and_the_reason_stays_one_bounded_line(gate_api):
    with gate_api.https(gate_api.token) as agent:
        assert agent.post("/v1/parity", json={"node": "cloud3", "differences": ["x"]}).status_code == 403
        assert agent.post("/v1/parity", json={"node": "cloud2", "differences": ["a\nReason=x"]}).status_code == 422
        assert agent.post("/v1/parity", json={"node": "cloud2", "differences": []}).status_code == 422
        many = [f"Python package p{i} missing on the node, 1.0 on-prem" for i in range(200)]
        assert agent.post("/v1/parity", json={"node": "cloud2", "differences": many}).status_code == 202
        assert agent.get("/v1/parity").json()["reference"] == REFERENCE
    [intent] = [i for i in gate_api.store_.intents() if i.kind == "parity"]
    assert len(intent.reason) <= 200 and intent.reason.endswith("more")


def test_the_gate_is_open_without_a_reference_and_closed_when_the_daemon_cannot_be_asked(tmp_path):
    with serving(tmp_path) as served:  # no [parity] reference_file
        agent = AgentConfig(daemon_url=served.url, daemon_ca_file=served.ca, node_name="cloud1")
        measure, seen = _measured(NODE_24)
        # no agent token: the daemon refuses the agent (401), which is not "no reference"
        assert run_gate(agent, "cloud1", measure=measure, attempts=2, sleep=lambda s: None) == UNREACHABLE
        assert seen == {}
        url = served.url
    unreachable = AgentConfig(daemon_url=url, daemon_ca_file=str(tmp_path / "none.pem"))
    assert run_gate(unreachable, "cloud1", measure=measure, attempts=2, sleep=lambda s: None) == UNREACHABLE
    assert run_gate(AgentConfig(), "cloud1", measure=measure) == MATCHES  # no daemon to ask: open, and logged
    with pytest.raises(ValueError, match="TLS required"):  # a token never crosses in clear: refused at load
        AgentConfig(daemon_url="http://head:8787")


def test_no_reference_configured_opens_the_gate(tmp_path):
    with serving(tmp_path) as served:
        post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud1"})
        with ApiClient(served.config.api.socket) as api:
            token = api.post("/v1/nodes/cloud1/agent-token")["token"]
        (tmp_path / "t").write_text(token)
        (tmp_path / "t").chmod(0o600)
        agent = AgentConfig(daemon_url=served.url, daemon_token_file=str(tmp_path / "t"), daemon_ca_file=served.ca)
        measure, seen = _measured(NODE_24)
        assert run_gate(agent, "cloud1", measure=measure) == MATCHES and seen == {}


@pytest.mark.parametrize(("on_prem_release", "code"), [("host", MATCHES), ("24.11.5", DIFFERS)])
def test_burstd_agent_parity_gate_measures_this_host_for_real(tmp_path, on_prem_release, code):
    """``burstd-agent --parity-gate`` as node-bootstrap.sh runs it, with the real probes: this host (Slurm 22.05)
    passes a reference of its own release and is refused by a 24.11 one, the lease reason naming both."""
    from burstd.agent.fingerprint import slurm_facts
    from burstd.agent.main import main

    here = slurm_facts()["slurm.release"]
    reference = {"slurm.release": here if on_prem_release == "host" else on_prem_release}
    (tmp_path / "reference.json").write_text(json.dumps(reference))
    with serving(tmp_path, {"parity": {"reference_file": str(tmp_path / "reference.json")}}) as served:
        post_unix_json(served.config.api.socket, "/v1/hooks/resume", {"hostlist": "cloud1"})
        with ApiClient(served.config.api.socket) as api:
            (tmp_path / "agent.token").write_text(api.post("/v1/nodes/cloud1/agent-token")["token"])
        (tmp_path / "agent.token").chmod(0o600)
        (tmp_path / "node.toml").write_text(
            f'[agent]\ndaemon_url = "{served.url}"\ndaemon_token_file = "{tmp_path / "agent.token"}"\n'
            f'daemon_ca_file = "{served.ca}"\n')
        assert main(["--config", str(tmp_path / "node.toml"), "--node", "cloud1", "--parity-gate"]) == code
        reasons = [i.reason for i in served.store_.intents() if i.kind == "parity"]
    assert reasons == ([] if code == MATCHES else [f"parity: slurmd {here} on the node, 24.11.5 on-prem"])
