"""Issue 24 item 1, the daemon side: pending jobs' data directives read once from their batch scripts, bad ones
kept on-prem, and the view handed to decide()."""

from __future__ import annotations

from burstd.daemon.data_needs import REFUSED, UNREAD, JobDataNeeds
from burstd.domain.data import NO_DATA, DataItem
from burstd.domain.slurm import Job, Snapshot
from burstd.slurm.base import SlurmError

SCRIPTS = {
    1: "#!/bin/bash\n#BURSTD stage-in /proj/data size=10GB\nsrun x\n",
    2: "#!/bin/bash\n#BURSTD stage-in relative/path\n",
    3: "#!/bin/bash\nsrun x\n",
}


def snap(*ids: int, state: str = "PENDING") -> Snapshot:
    return Snapshot(taken_at=0.0, jobs=tuple(Job(i, "j", "u", "a", ("batch",), state) for i in ids))


def test_scripts_are_read_once_parsed_and_bad_ones_kept_home():
    calls: list[int] = []

    def reader(jid: int) -> str:
        calls.append(jid)
        if jid not in SCRIPTS:
            raise SlurmError(f"job {jid} has no batch script")
        return SCRIPTS[jid]

    needs = JobDataNeeds(reader)
    view = needs.view(snap(1, 2, 3, 4), near={"aws": {"/proj/data"}})
    assert view is not None and view.near == {"aws": {"/proj/data"}}
    assert view.needs[1].inputs == (DataItem("/proj/data", 10 * 10**9),)
    assert view.needs[2] is REFUSED and "line 2: path 'relative/path' is not absolute" in needs.errors[2]
    assert view.needs[3] == NO_DATA and view.needs[4] == NO_DATA  # no directives; no script at all
    needs.view(snap(1, 2, 3, 4))
    assert calls == [1, 2, 3, 4]  # read once each
    needs.view(snap(1))  # 2, 3 and 4 ended: forgotten
    assert set(needs.known) == {1} and needs.errors == {}


def test_reads_are_bounded_a_cycle_and_an_unread_job_stays_home_until_read():
    needs = JobDataNeeds(lambda jid: SCRIPTS[3], max_reads=2)
    first = needs.view(snap(1, 2, 3))
    assert first is not None and [first.needs[j] for j in (1, 2, 3)] == [NO_DATA, NO_DATA, UNREAD]
    second = needs.view(snap(1, 2, 3))
    assert second is not None and second.needs[3] == NO_DATA
    assert JobDataNeeds(None).view(snap(1)) is None  # a backend without batch_script: no view


def test_the_cycle_reads_scripts_through_the_adapter_and_keeps_never_leave_jobs_home():
    from burstd.config import parse_config
    from burstd.daemon.reconcile import Reconciler
    from tests.unit.daemon.fakes import FakeAdapter, FakeClock, FakeProvider, FakeStore

    cfg = parse_config({
        "pools": [{"name": "local", "provider": "local", "partition": "cloud", "node_prefix": "cloud",
                   "node_count": 4, "instance_types": [{"name": "ns", "cpus": 2, "memory_mb": 1000}],
                   "price_per_hour": 0.5}],
        "policy": {"onprem_partitions": ["batch"], "waiting": {"kind": "none"}},
        "budget": {"default_account_usd": 100},
    })

    class ScriptAdapter(FakeAdapter):
        def batch_script(self, job_id: int) -> str:
            return "#!/bin/sh\n#BURSTD data-never-leaves\n" if job_id == 1 else "#!/bin/sh\ntrue\n"

    clock = FakeClock()
    adapter = ScriptAdapter()
    rec = Reconciler(cfg, FakeStore(clock), adapter, {"local": FakeProvider("local", clock)}, clock=clock)
    adapter.jobs.extend(Job(i, "j", "alice", "chem", ("batch",), "PENDING", reason="Resources", time_limit_min=10,
                            cpus=1, submit_time=int(clock() - 3600)) for i in (1, 2))
    rec.cycle()
    d = rec.last_decisions
    assert d is not None and d.kept_home_for_data == [1]
    assert "declares #BURSTD data-never-leaves" in d.explanations[1].reason
    assert "declared no data" in d.explanations[2].reason and d.explanations[2].burst
    assert "burstd_jobs_kept_home_for_data 1.0" in rec.metrics.render().decode()
