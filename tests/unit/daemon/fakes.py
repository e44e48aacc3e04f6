"""Small fakes of the daemon's edges (store, Slurm adapter, provider) for unit tests only.

The integration tests use the real Store (SQLite), the real Slurm bed and the real local provider.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import replace

from burstd.domain.daemon_state import Cooldown, PauseState, PoolHealthRecord, StoredIntent
from burstd.domain.leadership import Fenced, LeaderRecord
from burstd.domain.budget import BudgetBook
from burstd.domain.lease import Lease, LeaseEvent, LeaseState, check_transition
from burstd.domain.slurm import Job, Node, Snapshot
from burstd.domain.ledger import accrue
from burstd.providers.base import ErrorKind, Instance, LaunchRequest, ProviderError


class FakeClock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


class FakeStore:
    def __init__(self, clock):
        self.clock = clock
        self._leases: dict[str, Lease] = {}
        self._events: list[dict] = []
        self._settings: dict[str, str] = {}
        self._job_markets: dict[int, str] = {}
        self._intents: list[StoredIntent] = []
        self._allocations: dict[str, dict] = {}  # lease id -> (job, start) -> Allocation (the spend ledger's)
        self._cooldowns: dict[str, Cooldown] = {}
        self.spend_log: list = []  # SpendIntervals accrued
        self._pause: PauseState | None = None
        self._health: dict[str, PoolHealthRecord] = {}
        self._ids = itertools.count(1)
        self._leader: LeaderRecord | None = None
        self.orphan_log: list[dict] = []

    def create_lease(self, *, pool, node_name, market="spot", price_per_hour_micros=0, job_ids=(), account="",
                     reason="", offering=None, lease_id=None, gang=None, at=None):
        if self.lease_for_node(node_name) is not None:
            raise RuntimeError(f"NodeBusy: {node_name}")  # the real store's one-open-lease-per-node rule
        lid = lease_id or f"lease-{next(self._ids):04d}"
        now = self.clock() if at is None else at
        lease = Lease(lid, pool, node_name, LeaseState.REQUESTED, market=market,
                      price_per_hour_micros=price_per_hour_micros, created_at=now, state_since=now,
                      job_ids=tuple(job_ids), account=account, reason=reason, gang=gang)
        self._leases[lid] = lease
        self._events.append(LeaseEvent(lid, now, None, LeaseState.REQUESTED, reason, event_id=len(self._events) + 1))
        return lease

    def transition(self, lease_id, target, reason="", *, at=None, expect=None, extra=None, fence=None, **fields):
        if fence is not None:
            self.check_fence(fence)
        state = LeaseState(target)
        lease = self._leases[lease_id]
        check_transition(lease.state, state)
        old = lease.state
        lease = replace(lease, state=state, state_since=self.clock() if at is None else at, reason=reason, **fields)
        self._leases[lease_id] = lease
        self._events.append(LeaseEvent(lease_id, self.clock(), old, state, reason, dict(extra or {}),
                                       event_id=len(self._events) + 1))
        return lease

    def lease_for_node(self, node):
        return next((x for x in self._leases.values() if x.node_name == node
                     and x.state not in (LeaseState.TERMINATED, LeaseState.REFUSED)), None)

    def lease(self, lease_id):
        return self._leases[lease_id]

    def leases(self, states=None, *, pool=None, node=None, gang=None, since=None, limit=None):
        return [x for x in self._leases.values()
                if (states is None or x.state in states) and (gang is None or x.gang == gang)
                and (pool is None or x.pool == pool) and (node is None or x.node_name == node)][:limit]

    def events(self, lease_id=None, *, limit=100):
        return [e for e in self._events if lease_id is None or e.lease_id == lease_id][-limit:]

    def get_setting(self, key, default=None):
        return self._settings.get(key, default)

    def set_setting(self, key, value, *, at=None):
        self._settings[key] = value

    def queue_intents(self, items):
        ids = []
        for kind, node, reason, at in items:
            ids.append(next(self._ids))
            self._intents.append(StoredIntent(ids[-1], kind, node, reason, at))
        return ids

    def intents(self):
        return list(self._intents)

    def forget_intents(self, ids):
        ids = set(ids)
        before = len(self._intents)
        self._intents = [i for i in self._intents if i.intent_id not in ids]
        return before - len(self._intents)

    def job_markets(self):
        return dict(self._job_markets)

    def set_job_market(self, job_id, market, *, at=None):
        if market is None:
            self._job_markets.pop(job_id, None)
        else:
            self._job_markets[job_id] = market

    def forget_job_markets(self, job_ids):
        return sum(self._job_markets.pop(j, None) is not None for j in set(job_ids))

    def pause_state(self):
        return self._pause

    def set_pause(self, paused, *, reason="", by="", at=None):
        self._pause = PauseState(paused, reason, by, self.clock() if at is None else at)
        return self._pause

    def pool_health(self):
        return dict(self._health)

    def save_pool_health(self, record, *, at=None):
        self._health[record.pool] = record

    def cooldowns(self, now=None):
        t = self.clock() if now is None else now
        return {k: c for k, c in self._cooldowns.items() if c.until > t}

    def set_cooldown(self, offering, until, reason="", *, at=None):
        self._cooldowns[offering] = Cooldown(offering, until, reason)

    # the election row, with the real store's rules (burstd.db.leadership), on the fake clock
    def claim_leadership(self, holder, lease_s, *, now=None):
        t = self.clock() if now is None else now
        cur = self._leader
        if cur is None or (cur.holder != holder and cur.expires_at <= t):
            epoch = 1 if cur is None else cur.epoch + 1
            self._leader = LeaderRecord(holder, epoch, t, t, t + lease_s, t)
        elif cur.holder == holder:
            self._leader = replace(cur, renewed_at=t, expires_at=max(cur.expires_at, t + lease_s), now=t)
        return replace(self._leader, now=t)

    def resign_leadership(self, holder):
        if self._leader is None or self._leader.holder != holder:
            return False
        self._leader = replace(self._leader, expires_at=0.0)
        return True

    def leader(self, *, now=None):
        return self._leader

    def check_fence(self, fence):
        cur = self._leader
        if cur is None or (cur.holder, cur.epoch) != (fence.holder, fence.epoch):
            raise Fenced(fence, cur)

    def record_orphan_termination(self, pool, instance_id, *, lease_id=None, reason="", fence=None, at=None):
        if fence is not None:
            self.check_fence(fence)
        self.orphan_log.append({"pool": pool, "instance_id": instance_id, "lease_id": lease_id,
                                "epoch": None if fence is None else fence.epoch})
        return len(self.orphan_log)

    def allocations(self, lease_id):
        return sorted(self._allocations.get(lease_id, {}).values(), key=lambda a: (a.start, a.job_id))

    def record_allocations(self, lease_id, allocations):
        """Keyed by (job, start) like the real store: seeing a job again updates its end."""
        rows = self._allocations.setdefault(self.lease(lease_id).lease_id, {})
        allocations = list(allocations)
        for a in allocations:
            rows[(a.job_id, a.start)] = a
        return len(allocations)

    def accrue_spend(self, lease_id, until, *, split_every_s=3600.0, fence=None):
        """The real store's one accrual path over the fake's records (no price changes): ledger.accrue, then
        the intervals recorded and ``accrued_until`` advanced, all at once."""
        if fence is not None:
            self.check_fence(fence)
        lease = self.lease(lease_id)
        items = accrue(lease, until, allocations=self.allocations(lease_id), split_every_s=split_every_s)
        if items:
            self.spend_log.extend(items)
            self._leases[lease_id] = replace(lease, accrued_until=max(iv.end for iv in items))
        return items

    def spend_intervals(self, lease_id=None, since=None, until=None):
        return []  # no spend ledger here: nothing charged (tests/integration/live_api.py has the real Store)

    def data_spend(self, since=None, until=None):
        return []  # no data booked here either

    def budget_book(self, period, now, config=None):
        """No budgets set and nothing spent: the guard then refuses nothing that fits the pools."""
        return BudgetBook(period_start=now - 86400, period_end=now + 86400)


class FakeAdapter:
    backend = "fake"

    def __init__(self):
        self.jobs: list[Job] = []
        self.nodes: dict[str, Node] = {}
        self.calls: list[tuple] = []
        self.snapshots = 0
        self.ended: dict[int, str] = {}
        self.expedited: list[int] = []  # jobs requeued with expedite=True (a lost running node's)

    def snapshot(self):
        self.snapshots += 1
        return Snapshot(taken_at=0.0, jobs=tuple(self.jobs), nodes=tuple(self.nodes.values()))

    def add_job(self, job_id, state, nodes="", account="chem"):
        """A job Slurm runs (or configures) on ``nodes``: what a lost node's jobs look like in the snapshot."""
        self.jobs.append(Job(job_id, f"job{job_id}", "alice", account, ("batch",), state, nodes=nodes))

    def set_node(self, name, state="IDLE", *flags):
        self.nodes[name] = Node(name, state, flags=("CLOUD", *flags))

    def set_partitions(self, job_id, partitions):
        self.calls.append(("set_partitions", job_id, tuple(partitions)))

    def add_partition(self, job_id, partition):
        self.calls.append(("add_partition", job_id, partition))

    def remove_partition(self, job_id, partition):
        self.calls.append(("remove_partition", job_id, partition))

    def release_hold(self, job_id):
        self.calls.append(("release_hold", job_id))

    def start_now(self, job_id):
        self.calls.append(("start_now", job_id))

    def requeue(self, job_id, *, expedite=False):
        self.calls.append(("requeue", job_id))
        if expedite:
            self.expedited.append(job_id)

    slurmdbd_accounts: set[str] | None = None  # None: a Slurm without slurmdbd
    sacct: list | None = None  # allocations slurmdbd recorded (burstd.report.sacct_reconcile.SacctJob); None: none

    def accounts(self):
        return self.slurmdbd_accounts

    slurmdbd_associations: set[tuple[str, str]] | None = None  # (user, account); None: a Slurm without slurmdbd

    def associations(self):
        return self.slurmdbd_associations

    def enforces_associations(self):
        return None if self.sacct is None else False

    def accounting_enabled(self):
        return self.sacct is not None

    sacct_error: Exception | None = None  # what sacct_jobs raises (SlurmError: slurmdbd does not answer)

    def sacct_jobs(self, since, nodes=None, jobs=None):
        """As ``sacct -D -S since [--nodelist] [--jobs]`` selects: runs that had not ended before ``since``; a
        plain id names the job and, for an array's id, all its tasks; ``1234_5`` that task."""
        self.calls.append(("sacct_jobs", since, tuple(nodes or ()), tuple(str(r) for r in jobs or ())))
        if self.sacct_error is not None:
            raise self.sacct_error

        def named(j):
            return any(j.job_id == r.job_id or j.array_job_id == r.job_id if r.task is None
                       else (j.array_job_id, j.array_task_id) == (r.job_id, r.task) for r in jobs)

        return [j for j in self.sacct or [] if (not nodes or set(j.nodes) & set(nodes)) and (not jobs or named(j))
                and (j.end is None or j.end >= since)]

    def ctld_health(self):
        return None

    slurm_instances: list | None = None  # what `sacctmgr show instance` lists (SlurmInstance); None: not recorded

    def instances(self, since, nodes=None):
        return self.slurm_instances

    def set_instance(self, node, instance_id, instance_type):
        self.calls.append(("set_instance", node, instance_id, instance_type))
        return True

    def job_state(self, job_id):
        """Like Slurm: a live job's state, an ended one's from ``ended`` (job id -> state), else forgotten."""
        live = next((j.state for j in self.jobs if j.job_id == job_id), None)
        return live or self.ended.get(job_id)

    def signal(self, job_id, signal, *, batch=False, full=False):
        self.calls.append(("signal", job_id, signal))

    def set_node_address(self, node, address, hostname=None):
        self.calls.append(("set_node_address", node, address))

    def drain(self, nodes, reason):
        self.calls.append(("drain", tuple(nodes), reason))

    def power_down(self, nodes, *, force=False, reason=""):
        self.calls.append(("power_down", tuple(nodes), force))
        for n in nodes:
            if n in self.nodes:
                # Slurm keeps the reason given with the power-down once the node is powered down
                self.nodes[n] = replace(self.nodes[n], state="IDLE", flags=("CLOUD", "POWERED_DOWN"),
                                        reason=reason or self.nodes[n].reason)

    def power_up(self, nodes):
        self.calls.append(("power_up", tuple(nodes)))

    def clear_reason(self, nodes):
        self.calls.append(("clear_reason", tuple(nodes)))
        for n in nodes:
            if n in self.nodes:
                self.nodes[n] = replace(self.nodes[n], reason="")

    def resume(self, nodes):
        self.calls.append(("resume", tuple(nodes)))
        for n in nodes:
            if n in self.nodes:
                self.nodes[n] = replace(self.nodes[n], state="IDLE", reason="",
                                        flags=tuple(f for f in self.nodes[n].flags if f not in ("DOWN", "DRAIN")))


class FakeProvider:
    """Idempotent on lease id, like the real contract; can be told to fail."""

    def __init__(self, name, clock):
        self.name = name
        self.clock = clock
        self.instances: dict[str, Instance] = {}
        self.launch_calls: list[str] = []
        self.requests: list[LaunchRequest] = []  # every launch request as the provider got it
        self.terminate_calls: list[str] = []
        self.fail_next: ErrorKind | None = None
        self.raise_next: ProviderError | None = None  # a given error (a subclass: ParityRefusedError)
        self._ids = itertools.count(1)

    def launch(self, request: LaunchRequest) -> Instance:
        self.launch_calls.append(request.lease_id)
        self.requests.append(request)
        if self.raise_next is not None:
            exc, self.raise_next = self.raise_next, None
            raise exc
        if self.fail_next is not None:
            kind, self.fail_next = self.fail_next, None
            raise ProviderError(kind, "injected", code="Injected")
        for inst in self.instances.values():
            if inst.lease_id == request.lease_id and not inst.is_gone:
                return inst
        inst = Instance(f"i-{next(self._ids):04d}", request.lease_id, request.node_name, self.name, "running",
                        self.clock())
        self.instances[inst.instance_id] = inst
        return inst

    def terminate(self, instance_ids):
        for iid in instance_ids:
            self.terminate_calls.append(iid)
            self.instances.pop(iid, None)

    def list_instances(self):
        return list(self.instances.values())

    def prices(self):
        return {}

    def close(self):
        pass

    def live(self):
        return [i for i in self.instances.values() if not i.is_gone]


class FakeGangProvider(FakeProvider):
    """A provider with its own all-or-nothing gang launch (``burstd.providers.base.GangLauncher``)."""

    def __init__(self, name, clock):
        super().__init__(name, clock)
        self.gang_calls: list[tuple[str, tuple[str, ...]]] = []

    def launch_gang(self, gang, requests):
        """All or nothing, idempotent on the gang (the GangLauncher contract), one call recorded per gang."""
        self.gang_calls.append((gang, tuple(r.lease_id for r in requests)))
        if self.fail_next is not None:
            kind, self.fail_next = self.fail_next, None
            raise ProviderError(kind, "injected", code="Injected")
        out = []
        for r in requests:
            inst = next((i for i in self.instances.values() if i.lease_id == r.lease_id and not i.is_gone), None)
            if inst is None:
                inst = Instance(f"i-{next(self._ids):04d}", r.lease_id, r.node_name, self.name, "running",
                                self.clock(), extra={"gang": gang})
                self.instances[inst.instance_id] = inst
            out.append(inst)
        return out


def as_dict(x):
    return dataclasses.asdict(x)


class FakeGateAdapter(FakeAdapter):
    """A FakeAdapter with the cloud gate's calls (``burstd.daemon.cloud_gate.GateSlurm``): partitions' account
    lists as Slurm would keep them, holds on its jobs."""

    def __init__(self, partitions=None):
        super().__init__()
        from burstd.domain.partition_access import PartitionAccess
        self.access = dict(partitions or {"cloud": PartitionAccess()})
        self.reads = 0
        self.reservations: dict = {}  # name -> CloudReservation

    def cloud_reservation(self, name):
        return self.reservations.get(name)

    def update_reservation_users(self, name, denied_users):
        """As 24.11 does when jobs run in it: a longer deny list is taken, a shorter one silently ignored."""
        self.calls.append(("update_reservation_users", name, tuple(denied_users)))
        have = self.reservations[name]
        if set(denied_users) >= set(have.denied_users):
            self.reservations[name] = dataclasses.replace(have, denied_users=tuple(sorted(denied_users)))

    def update_reservation_accounts(self, name, accounts):
        """As every release does, jobs running in it or not: the account list is replaced."""
        assert accounts, "Slurm takes no empty account list"
        self.calls.append(("update_reservation_accounts", name, tuple(accounts)))
        self.reservations[name] = dataclasses.replace(self.reservations[name], accounts=tuple(sorted(accounts)))

    def set_cloud_reservation(self, name, want, *, exists):
        assert exists == (name in self.reservations), "delete only what exists, as scontrol would refuse"
        self.calls.append(("set_cloud_reservation", name, want))
        self.reservations.pop(name, None)
        if want is not None and (want.denied_users or want.accounts is not None):  # else scontrol creates none
            self.reservations[name] = want

    def partition_access(self, partition):
        self.reads += 1
        return self.access[partition]

    def set_partition_access(self, partition, access):
        self.calls.append(("set_partition_access", partition, access))
        self.access[partition] = access

    def _edit(self, job_id, **changes):
        self.jobs = [replace(j, **changes) if j.job_id == job_id else j for j in self.jobs]

    def hold_with_reason(self, job_id, comment):
        self.calls.append(("hold", job_id, comment))
        self._edit(job_id, hold=True, reason="JobHeldAdmin")

    def requeue_hold_with_reason(self, job_id, comment):
        self.calls.append(("requeue_hold", job_id, comment))
        self._edit(job_id, hold=True, reason="JobHeldAdmin", state="PENDING", nodes="")

    def release_with_note(self, job_id, comment):
        self.calls.append(("release", job_id))
        self._edit(job_id, hold=False, reason="None")
