"""Carries out ``burstd.policy.cloud_access`` each cycle (issue 21 item 1): a cloud node that is already up runs
only jobs the eligibility rule lets in, not whatever is sent to its partition.

* Each cloud partition's AllowAccounts/DenyAccounts: the admin's own settings (read from Slurm the first time,
  and again whenever Slurm no longer shows what burstd last wrote: ``scontrol reconfigure`` went back to
  slurm.conf) plus the rule's refused and unfunded accounts. Written only when it changes; read again at most every
  ``reread_s`` (one ``scontrol show partition`` per cloud partition), so the cycle's Slurm cost stays flat.
* A MAGNETIC reservation ``burstd_<cluster id>`` over every cloud node (every job uses a magnetic reservation
  without asking, so every job is measured against its lists): excluded users in ``Users=-name`` (Slurm has no
  per-user partition setting), and the accounts that may burst in ``Accounts=`` (those slurmdbd knows, funded,
  not excluded), which Slurm holds on every release where the partition lists need enforced associations.
  Changed in place where Slurm allows it (jobs may run in it), else made again; read every ``reread_s`` too.
* burstd's holds, by job id, in ``state_dir/cloud_holds.json``, so that a restart releases them too and never
  releases a hold an admin or a user put on.

The cli and rest backends make these calls with scontrol (slurmrestd has no call for them). A backend without
them (``pyslurm``) is said once at start; the launch guard still refuses every launch the rule refuses.
"""

from __future__ import annotations

import json
import os
import pwd
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from burstd.config import Config
from burstd.daemon.associations import SlurmdbdAssociations
from burstd.daemon.logging import ev, get_logger
from burstd.domain.budget import BudgetBook
from burstd.domain.hostlist import expand
from burstd.domain.partition_access import CloudReservation, PartitionAccess, is_slurm_name
from burstd.slurm.conf import hostlist
from burstd.domain.slurm import Job, Snapshot
from burstd.policy.cloud_access import (cloud_reservation, hold_comment, partition_accounts, plan_gate,
                                        reservation_accounts, unfunded_accounts)
from burstd.policy.eligibility import Associations, Eligibility, association_refusal

log = get_logger("cloud_gate")

STATE_FILE = "cloud_holds.json"


@runtime_checkable
class GateSlurm(Protocol):
    """The Slurm calls the gate needs (``burstd.slurm.access.PartitionAccessMixin``)."""

    def partition_access(self, partition: str) -> PartitionAccess: ...
    def set_partition_access(self, partition: str, access: PartitionAccess) -> None: ...
    def hold_with_reason(self, job_id: int, comment: str) -> None: ...
    def requeue_hold_with_reason(self, job_id: int, comment: str) -> None: ...
    def release_with_note(self, job_id: int, comment: str) -> None: ...
    def cloud_reservation(self, name: str) -> CloudReservation | None: ...
    def set_cloud_reservation(self, name: str, want: CloudReservation | None, *, exists: bool) -> None: ...
    def update_reservation_users(self, name: str, denied_users: Sequence[str]) -> None: ...
    def update_reservation_accounts(self, name: str, accounts: Sequence[str]) -> None: ...
    def remove_partition(self, job_id: int, partition: str) -> None: ...


class CloudGate:
    def __init__(self, config: Config, adapter: Any, eligibility: Eligibility,
                 associations: SlurmdbdAssociations, clock: Callable[[], float], *, reread_s: float = 60.0):
        self.config, self.eligibility, self.associations, self.clock = config, eligibility, associations, clock
        self.slurm: GateSlurm | None = adapter if isinstance(adapter, GateSlurm) else None
        self.reread_s = reread_s
        self.pools = {p.partition: p.name for p in config.pools}
        self.path = Path(config.daemon.state_dir) / STATE_FILE
        self.static: dict[str, PartitionAccess] = {}
        self.written: dict[str, PartitionAccess] = {}
        self.held: dict[int, str] = {}  # job -> why burstd holds it
        # excluded users: a MAGNETIC reservation over every cloud node with Users=-name (burstd_<cluster id>)
        self.reservation = cloud_reservation(config.cluster.id)
        self.cloud_nodes = tuple(sorted(n for p in config.pools for n in expand(hostlist(p.node_prefix,
                                                                                          p.node_count))))
        self._reservation_seen: tuple[float, CloudReservation | None] | None = None
        self._reservation_retry_at = 0.0
        self._last_assoc: Associations | None = None
        self._assoc_read = False
        self._read_at: dict[str, float] = {}
        if self.slurm is not None:
            self._load()
        elif self.pools:
            log.warning("this Slurm backend cannot restrict cloud partitions or hold jobs: a cloud node already up "
                        "runs any job sent to its partition (use slurm.backend = \"cli\")",
                        extra=ev(backend=getattr(adapter, "backend", "?")))

    # --- the rule, per job -----------------------------------------------------------------------------
    def refusal(self, pool: str, job: Job) -> str | None:
        """The identity half of the rule: exclusions, pool accounts, slurmdbd's associations. A slurmdbd that
        cannot be read holds nothing here (the launch guard refuses launches meanwhile)."""
        why = self.eligibility.refusal(pool, job.account, job.user, job.qos)
        if why is None and job.account:
            try:
                why = association_refusal(job.user, job.account, self.associations.current())
            except Exception:  # noqa: BLE001 - slurmdbd down: the guard's business, not a reason to hold the queue
                why = None
        return why

    # --- one cycle -------------------------------------------------------------------------------------
    def run(self, snapshot: Snapshot, book: BudgetBook) -> list[str]:
        """Bring the cloud partitions and the queue in line with the rule; the errors, for the cycle report."""
        if self.slurm is None or not self.pools:
            return []
        errors: list[str] = []
        unfunded = unfunded_accounts(book, self.config, self._accounts(snapshot, book))
        for partition, pool in self.pools.items():
            try:
                self._partition(partition, pool, unfunded)
            except Exception as exc:  # noqa: BLE001 - one partition's failure must not stop the others
                errors.append(f"cloud gate {partition}: {exc}")
                log.warning("cloud partition not restricted", extra=ev(partition=partition, error=str(exc)))
        try:
            self._reservation(unfunded)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"cloud gate reservation: {exc}")
            log.warning("cloud nodes' reservation not set", extra=ev(error=str(exc)))
        errors += self._queue(snapshot, unfunded)
        return errors

    def _reservation(self, unfunded: frozenset[str]) -> None:
        """Excluded users (that this host knows: Slurm refuses a reservation naming an unknown one) go into the
        reservation's deny list, and the accounts that may burst into its account list (none without slurmdbd);
        nothing to say: no reservation. Read every ``reread_s``, written when it differs."""
        assert self.slurm is not None
        users = tuple(sorted(u for u in self.eligibility.users if is_slurm_name(u) and _known_user(u)))
        accounts = reservation_accounts(self.eligibility, self.pools.values(), unfunded, self._known_accounts())
        want = CloudReservation(self.cloud_nodes, users, accounts) if users or accounts is not None else None
        now = self.clock()
        if self._reservation_seen is None or now - self._reservation_seen[0] >= self.reread_s:
            self._reservation_seen = (now, self.slurm.cloud_reservation(self.reservation))
        have = self._reservation_seen[1]
        if have != want and now >= self._reservation_retry_at:
            self._reservation_retry_at = now + self.reread_s  # a refused write is tried again later, not per cycle
            if (have is not None and want is not None and have.nodes == want.nodes
                    and not have.root_only and not want.root_only):
                # jobs may run in it (it cannot be deleted then): change its lists in place, and check
                if have.denied_users != want.denied_users and want.denied_users:
                    self.slurm.update_reservation_users(self.reservation, want.denied_users)
                if have.accounts != want.accounts and want.accounts:
                    self.slurm.update_reservation_accounts(self.reservation, want.accounts)
                have = self.slurm.cloud_reservation(self.reservation)
            if have != want:
                self.slurm.set_cloud_reservation(self.reservation, want, exists=have is not None)
            self._reservation_retry_at = 0.0
            self._reservation_seen = (now, want)
            log.info("cloud reservation set", extra=ev(reservation=self.reservation, denied_users=list(users),
                                                       accounts=None if accounts is None else list(accounts),
                                                       nodes=len(self.cloud_nodes)))

    def _known_accounts(self) -> frozenset[str] | None:
        """slurmdbd's accounts (None: no slurmdbd). While slurmdbd cannot be read, the reservation is written from
        the last copy read, and before any copy it is not touched (the error goes to the cycle report): it never
        widens to "no list" because slurmdbd is slow."""
        try:
            assoc = self.associations.current()
        except Exception:
            if not self._assoc_read:
                raise
            assoc = self._last_assoc
        self._last_assoc, self._assoc_read = assoc, True
        return None if assoc is None else assoc.accounts

    def _accounts(self, snapshot: Snapshot, book: BudgetBook) -> set[str]:
        """Every account burstd can name: the budget's, the queue's and slurmdbd's."""
        out = {*self.config.budget.accounts, *book.accounts, *(j.account for j in snapshot.jobs)}
        try:
            assoc = self.associations.current()
        except Exception:  # noqa: BLE001
            assoc = None
        if assoc is not None:
            out |= assoc.accounts
        return out

    def _partition(self, partition: str, pool: str, unfunded: frozenset[str]) -> None:
        assert self.slurm is not None
        now = self.clock()
        if partition not in self.static or now - self._read_at.get(partition, -1e18) >= self.reread_s:
            current = self.slurm.partition_access(partition)
            self._read_at[partition] = now
            if partition not in self.static or current != self.written.get(partition):
                # first sight, or Slurm went back to slurm.conf (reconfigure): what it shows is the admin's own
                self.static[partition] = current
                self.written[partition] = current
        want = partition_accounts(self.static[partition], self.eligibility, pool, unfunded)
        if want != self.written.get(partition):
            self.slurm.set_partition_access(partition, want)
            self.written[partition] = want
            self._save()
            log.info("cloud partition accounts set", extra=ev(partition=partition, allow=list(want.allow or ()),
                                                              deny=list(want.deny or ())))

    def _queue(self, snapshot: Snapshot, unfunded: frozenset[str]) -> list[str]:
        slurm = self.slurm
        assert slurm is not None
        edits = plan_gate(snapshot, self.pools, self.refusal, unfunded, self.held)
        errors: list[str] = []
        changed = bool(edits.forget)
        for jid in edits.forget:
            self.held.pop(jid, None)

        def act(what: str, jid: int, fn: Callable[..., None], *args: Any, **fields: Any) -> bool:
            try:
                fn(jid, *args)
            except Exception as exc:  # noqa: BLE001 - the job may have just ended or started: next cycle
                errors.append(f"cloud gate job {jid}: {exc}")
                log.warning(f"{what}: failed", extra=ev(job_id=jid, error=str(exc)))
                return False
            log.info(what, extra=ev(job_id=jid, **fields))
            return True

        for jid, part in edits.remove:
            act("job kept off a cloud partition the rule refuses", jid, slurm.remove_partition, part, partition=part)
        for jid, why in edits.hold:
            if act("job held: the rule refuses it the cloud", jid, slurm.hold_with_reason, hold_comment(why),
                   reason=why):
                self.held[jid], changed = why, True
        for jid, why in edits.requeue_hold:
            if act("job requeued and held: it started on a cloud node the rule refuses it", jid,
                   slurm.requeue_hold_with_reason, hold_comment(why), reason=why):
                self.held[jid], changed = why, True
        for jid in edits.release:
            if act("job released: the rule allows it again", jid, slurm.release_with_note,
                   "burstd released its hold"):
                self.held.pop(jid, None)
                changed = True
        if changed:
            self._save()
        return errors

    def why_held(self, job_id: int) -> str | None:
        """burstd's reason for holding ``job_id`` (for ``explain``), or None."""
        return self.held.get(job_id)

    # --- state -----------------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("cloud holds file unreadable; starting without it",
                        extra=ev(path=str(self.path), error=str(exc)))
            return
        self.held = {int(k): str(v) for k, v in dict(doc.get("held", {})).items()}
        for name, rec in dict(doc.get("partitions", {})).items():
            self.static[name] = _access(rec.get("static"))
            self.written[name] = _access(rec.get("written"))

    def _save(self) -> None:
        doc = {"held": {str(k): v for k, v in self.held.items()},
               "partitions": {n: {"static": _plain(self.static.get(n)), "written": _plain(w)}
                              for n, w in self.written.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".cloud_holds.")
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, self.path)


def _known_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _plain(access: PartitionAccess | None) -> dict[str, list[str] | None]:
    access = access or PartitionAccess()
    return {"allow": None if access.allow is None else list(access.allow),
            "deny": None if access.deny is None else list(access.deny)}


def _access(rec: Mapping[str, Any] | None) -> PartitionAccess:
    rec = rec or {}
    allow, deny = rec.get("allow"), rec.get("deny")
    return PartitionAccess(None if allow is None else tuple(map(str, allow)),
                           None if deny is None else tuple(map(str, deny)))
