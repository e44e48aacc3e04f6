"""A provider that delivers the node's agent token at boot gets one minted for the lease with each launch
(``Provider.wants_agent_token``: the local provider's image VMs); any other provider gets none, and a daemon
whose providers never ask makes no agent key."""

from __future__ import annotations

from burstd.daemon.agent_auth import AgentCredentials
from burstd.daemon.reconcile import Reconciler
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule
from tests.unit.daemon.test_daemon_reconcile import CFG


class TokenTakingProvider(FakeProvider):
    wants_agent_token = True


def _launch(tmp_path, provider_cls) -> tuple[FakeProvider, FakeStore]:
    clock = FakeClock()
    store, adapter, provider = FakeStore(clock), FakeAdapter(), provider_cls("local", clock)
    cfg = CFG.model_copy(update={"daemon": CFG.daemon.model_copy(update={"state_dir": str(tmp_path)})})
    rec = Reconciler(cfg, store, adapter, {"local": provider}, first_rule, clock=clock)
    adapter.add_job(6, "CONFIGURING", "cloud2")
    store.create_lease(pool="local", node_name="cloud2", job_ids=(6,))
    rec.cycle()
    return provider, store


def test_a_provider_that_delivers_tokens_gets_the_leases_own_with_the_launch(tmp_path):
    provider, store = _launch(tmp_path, TokenTakingProvider)
    [request] = provider.requests
    [lease] = store.leases()
    assert AgentCredentials.load(tmp_path).verify(request.agent_token) == (lease.lease_id, "cloud2")


def test_any_other_provider_gets_no_token_and_no_key_is_made(tmp_path):
    provider, _ = _launch(tmp_path, FakeProvider)
    [request] = provider.requests
    assert request.agent_token == ""
    assert not (tmp_path / "agent.key").exists()
