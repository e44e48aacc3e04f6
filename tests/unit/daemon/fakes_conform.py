"""The unit-test fakes conform to the seams the daemon is typed against: mypy checks these assignments (run by
``tests/unit/test_types.py`` in CI), so a fake that drifts from ``LeaseStore``, ``SlurmAdapter``, ``Provider`` or
``GangLauncher`` fails the suite instead of making production code bend to it."""

from __future__ import annotations

from burstd.daemon.ports import LeaseStore, RecordsStore
from burstd.daemon.reconcile import Decider
from burstd.db.store import Store
from burstd.policy.decide import decide
from burstd.providers.base import GangLauncher, Provider
from burstd.slurm.base import SlurmAdapter
from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeGangProvider, FakeProvider, FakeStore
from tests.unit.daemon.first_rule import first_rule

clock = FakeClock()
store: LeaseStore = FakeStore(clock)
adapter: SlurmAdapter = FakeAdapter()
provider: Provider = FakeProvider("p", clock)
gang_provider: GangLauncher = FakeGangProvider("p", clock)
test_decider: Decider = first_rule
real_decider: Decider = decide


def the_real_store_conforms(store: Store) -> tuple[LeaseStore, RecordsStore]:
    """``db.store.Store`` is what the daemon runs on: it must satisfy both protocols too."""
    return store, store


def the_gate_fake_conforms() -> None:
    from burstd.daemon.cloud_gate import GateSlurm
    from tests.unit.daemon.fakes import FakeGateAdapter

    gate: GateSlurm = FakeGateAdapter()
    assert gate
