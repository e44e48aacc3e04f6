"""scontrol calls that keep refused jobs off cloud nodes (``burstd.daemon.cloud_gate``): a cloud partition's
AllowAccounts/DenyAccounts, and burstd's own job holds with their reason. Argument lists, never a shell; every
account name is held to ``burstd.domain.partition_access.SLURM_NAME`` and every comment to one bounded line before
it reaches scontrol, so nothing a user typed after ``-A`` can add a setting of its own.

Slurm keeps both lists of a partition (setting one does not clear the other), and its ``-o`` listing shows only
one: each write therefore sets both, the unused one to its neutral value (``AllowAccounts=ALL``, ``DenyAccounts=``).
"""

from __future__ import annotations

from collections.abc import Sequence

from burstd.domain.hostlist import HostlistError, compress, expand
from burstd.domain.partition_access import CloudReservation, PartitionAccess, is_slurm_name
from burstd.slurm.base import HOSTLIST_RE, PARTITION_RE, SlurmError, check_name

_NEUTRAL = {"", "ALL", "(NULL)"}
ROOT_ONLY = "root"  # Users=root Accounts=root: the reservation that lets no account's job onto the cloud nodes
MAX_COMMENT = 250


def parse_partition_access(text: str, partition: str) -> PartitionAccess:
    """AllowAccounts/DenyAccounts of ``partition`` from ``scontrol show partition NAME -o``. Raises SlurmError
    when the listing does not name the partition (or names a value no account list can hold)."""
    for line in text.splitlines():
        kv = dict(tok.partition("=")[::2] for tok in line.split() if "=" in tok)
        if kv.get("PartitionName") != partition:
            continue
        return PartitionAccess(allow=_names(kv.get("AllowAccounts", "ALL"), partition),
                               deny=_names(kv.get("DenyAccounts", ""), partition))
    raise SlurmError(f"scontrol show partition {partition}: no such partition in its output")


def parse_reservation(text: str, name: str) -> CloudReservation | None:
    """burstd's reservation ``name`` from ``scontrol show reservation -o`` (every reservation), or None when
    there is none. Raises SlurmError on a listing it cannot read."""
    for line in text.splitlines():
        kv = dict(tok.partition("=")[::2] for tok in line.split() if "=" in tok)
        if kv.get("ReservationName") != name:
            continue
        try:
            nodes = tuple(sorted(expand(kv.get("Nodes", ""))))
        except HostlistError as exc:
            raise SlurmError(f"reservation {name}: Nodes={kv.get('Nodes', '')[:60]!r}: {exc}") from None
        users, accounts = kv.get("Users", "(null)"), kv.get("Accounts", "(null)")
        if users == ROOT_ONLY and accounts == ROOT_ONLY:  # what set_cloud_reservation writes for "no account"
            return CloudReservation(nodes, (), ())
        denied = () if users.upper() in _NEUTRAL else tuple(u.removeprefix("-") for u in users.split(",") if u)
        bad = [u for u in denied if not is_slurm_name(u)]
        if bad or (users.upper() not in _NEUTRAL and not users.startswith("-")):
            raise SlurmError(f"reservation {name}: Users={users[:60]!r} is not a deny list burstd wrote")
        allowed = None if accounts.upper() in _NEUTRAL else tuple(a for a in accounts.split(",") if a)
        if allowed is not None and (not allowed or not all(is_slurm_name(a) and a[0] != "-" for a in allowed)):
            raise SlurmError(f"reservation {name}: Accounts={accounts[:60]!r} is not an account list burstd wrote")
        return CloudReservation(nodes, tuple(sorted(denied)), None if allowed is None else tuple(sorted(allowed)))
    return None


def _names(value: str, partition: str) -> tuple[str, ...] | None:
    if value.upper() in _NEUTRAL:
        return None
    names = tuple(n for n in value.split(",") if n)
    bad = [n for n in names if not is_slurm_name(n)]
    if bad:
        raise SlurmError(f"partition {partition}: account list holds {bad[0][:40]!r}, not an account name")
    return names or None


def _account_list(key: str, names: Sequence[str]) -> str:
    for n in names:
        if not is_slurm_name(n):
            raise ValueError(f"{key}: {n[:40]!r} is not a Slurm account name (letters, digits and _ . @ + - only)")
    return ",".join(names)


def _reservation_acl(want: CloudReservation) -> list[str]:
    """The Users=/Accounts= settings of burstd's reservation; [] when it has nothing to say (no reservation)."""
    if want.root_only:
        return [f"Users={ROOT_ONLY}", f"Accounts={ROOT_ONLY}"]
    acl = []
    users = ",".join(f"-{u}" for u in want.denied_users if is_slurm_name(u))
    if users:
        acl.append(f"Users={users}")
    if want.accounts:
        acl.append(f"Accounts={_account_list('Accounts', want.accounts)}")
    return acl


def one_line(text: str, limit: int = MAX_COMMENT) -> str:
    """A comment as scontrol receives it: printable, one line, bounded."""
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


class PartitionAccessMixin:
    """For a backend that has ``run(cmd, args)`` (the cli backend)."""

    def run(self, cmd: str, args: Sequence[str]) -> str:  # provided by the backend
        raise NotImplementedError

    def partition_access(self, partition: str) -> PartitionAccess:
        check_name("partition", partition, PARTITION_RE)
        return parse_partition_access(self.run("scontrol", ["show", "partition", partition, "-o"]), partition)

    def set_partition_access(self, partition: str, access: PartitionAccess) -> None:
        check_name("partition", partition, PARTITION_RE)
        if access.allow:
            settings = ["DenyAccounts=", f"AllowAccounts={_account_list('AllowAccounts', access.allow)}"]
        else:
            settings = ["AllowAccounts=ALL", f"DenyAccounts={_account_list('DenyAccounts', access.deny or ())}"]
        self.run("scontrol", ["update", f"PartitionName={partition}", *settings])

    def cloud_reservation(self, name: str) -> CloudReservation | None:
        check_name("reservation", name, PARTITION_RE)
        return parse_reservation(self.run("scontrol", ["show", "reservation", "-o"]), name)

    def set_cloud_reservation(self, name: str, want: CloudReservation | None, *, exists: bool) -> None:
        """Replace burstd's reservation with ``want`` (None, or nothing to say: remove it). ``scontrol update``
        reads ``Users=-x`` as "remove x from the list", so a new deny list is a delete and a create."""
        check_name("reservation", name, PARTITION_RE)
        if exists:
            self.run("scontrol", ["delete", f"ReservationName={name}"])
        acl = _reservation_acl(want) if want is not None else []
        if want is None or not acl:
            return
        nodes = compress(list(want.nodes))
        if not HOSTLIST_RE.fullmatch(nodes):
            raise ValueError(f"reservation {name}: {nodes[:60]!r} is not a node list")
        self.run("scontrol", ["create", "reservation", f"ReservationName={name}", f"Nodes={nodes}",
                              "StartTime=now", "Duration=infinite", *acl, "Flags=MAGNETIC"])

    def update_reservation_users(self, name: str, denied_users: Sequence[str]) -> None:
        """Replace the reservation's deny list in place (a reservation jobs run in cannot be deleted). Slurm's
        update reads ``-name`` lists differently across releases: the caller reads the result back."""
        check_name("reservation", name, PARTITION_RE)
        users = ",".join(f"-{u}" for u in denied_users if is_slurm_name(u))
        if not users:
            raise ValueError(f"reservation {name}: no user to deny (delete it instead)")
        self.run("scontrol", ["update", f"ReservationName={name}", f"Users={users}"])

    def update_reservation_accounts(self, name: str, accounts: Sequence[str]) -> None:
        """Replace the reservation's account list in place: Slurm takes this while jobs run in it (22.05, 24.11
        and 26.05), where a new deny list of users is refused then. The caller reads the result back."""
        check_name("reservation", name, PARTITION_RE)
        if not accounts:
            raise ValueError(f"reservation {name}: no account to allow (write the root-only reservation instead)")
        self.run("scontrol", ["update", f"ReservationName={name}",
                              f"Accounts={_account_list('Accounts', accounts)}"])

    def hold_with_reason(self, job_id: int, comment: str) -> None:
        """An admin hold (a user cannot release it) and the reason in the job's AdminComment."""
        jid = str(_positive(job_id))
        self.run("scontrol", ["hold", jid])
        self.run("scontrol", ["update", f"jobid={jid}", f"admincomment={one_line(comment)}"])

    def requeue_hold_with_reason(self, job_id: int, comment: str) -> None:
        """``scontrol requeuehold``: a running job back to the queue, held, with the reason."""
        jid = str(_positive(job_id))
        self.run("scontrol", ["requeuehold", jid])
        self.run("scontrol", ["update", f"jobid={jid}", f"admincomment={one_line(comment)}"])

    def release_with_note(self, job_id: int, comment: str) -> None:
        jid = str(_positive(job_id))
        self.run("scontrol", ["release", jid])
        self.run("scontrol", ["update", f"jobid={jid}", f"admincomment={one_line(comment)}"])


def _positive(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"invalid job id {job_id!r}")
    return job_id
