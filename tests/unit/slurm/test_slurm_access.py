"""The scontrol calls behind the cloud gate (issue 21 item 1): argument lists only, every account name checked,
both lists written at once (Slurm keeps both, and ``-o`` shows one), comments one bounded line."""

from __future__ import annotations

import pytest

from burstd.domain.partition_access import PartitionAccess
from burstd.slurm.access import PartitionAccessMixin, parse_partition_access
from burstd.slurm.base import SlurmError

# ``scontrol show partition cloud -o`` on the 22.05 bed, default and after ``DenyAccounts=broke,physics``
DEFAULT = ("PartitionName=cloud AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
           "Nodes=cloud[1-4] State=UP TotalCPUs=8 TotalNodes=4")
DENIED = ("PartitionName=cloud AllowGroups=ALL DenyAccounts=broke,physics AllowQos=ALL AllocNodes=ALL "
          "Nodes=cloud[1-4] State=UP")


class Recorder(PartitionAccessMixin):
    def __init__(self, out: str = DEFAULT):
        self.calls: list[list[str]] = []
        self.out = out

    def run(self, cmd, args):
        self.calls.append([cmd, *args])
        return self.out


@pytest.mark.parametrize("text, expected", [
    (DEFAULT, PartitionAccess()),
    (DENIED, PartitionAccess(deny=("broke", "physics"))),
    ("PartitionName=cloud AllowAccounts=funded,chem", PartitionAccess(allow=("funded", "chem"))),
    ("PartitionName=onprem AllowAccounts=x\nPartitionName=cloud DenyAccounts=(null)", PartitionAccess()),
])
def test_the_account_lists_are_read_from_scontrols_one_liner(text, expected):
    assert parse_partition_access(text, "cloud") == expected


@pytest.mark.parametrize("text", ["", "PartitionName=other AllowAccounts=ALL", "PartitionName=cloud DenyAccounts=a;b"])
def test_a_listing_without_the_partition_or_with_a_foreign_name_is_an_error(text):
    with pytest.raises(SlurmError):
        parse_partition_access(text, "cloud")


def test_a_deny_list_also_resets_the_allow_list_and_the_other_way_round():
    r = Recorder()
    r.set_partition_access("cloud", PartitionAccess(deny=("broke", "physics")))
    r.set_partition_access("cloud", PartitionAccess(allow=("funded",)))
    r.set_partition_access("cloud", PartitionAccess())
    assert r.calls == [
        ["scontrol", "update", "PartitionName=cloud", "AllowAccounts=ALL", "DenyAccounts=broke,physics"],
        ["scontrol", "update", "PartitionName=cloud", "DenyAccounts=", "AllowAccounts=funded"],
        ["scontrol", "update", "PartitionName=cloud", "AllowAccounts=ALL", "DenyAccounts="],
    ]


@pytest.mark.parametrize("name", ["a,b", "x DenyQos=normal", "x\ny", "ALL", ""])
def test_an_account_that_could_add_a_setting_is_refused_before_scontrol_runs(name):
    r = Recorder()
    with pytest.raises(ValueError, match="DenyAccounts"):
        r.set_partition_access("cloud", PartitionAccess(deny=("ok", name)))
    with pytest.raises(ValueError):
        r.set_partition_access("cloud; rm", PartitionAccess(deny=("ok",)))
    assert r.calls == []


def test_a_hold_is_an_admin_hold_with_its_reason_as_one_line():
    r = Recorder()
    r.hold_with_reason(7, "burstd-hold: user x\nis excluded")
    r.requeue_hold_with_reason(8, "why")
    assert r.calls == [["scontrol", "hold", "7"], ["scontrol", "update", "jobid=7", "admincomment=burstd-hold: user x?is excluded"],
                       ["scontrol", "requeuehold", "8"], ["scontrol", "update", "jobid=8", "admincomment=why"]]
    with pytest.raises(ValueError):
        r.hold_with_reason(True, "x")  # type: ignore[arg-type]


RESV = ("ReservationName=burstd_c1 StartTime=2026-11-26T22:04:26 EndTime=2027-11-26T22:04:26 Duration=365-00:00:00 "
        "Nodes=cloud[1-4] NodeCnt=4 CoreCnt=8 Features=(null) PartitionName=(null) Flags=SPEC_NODES,MAGNETIC "
        "TRES=cpu=8 Users=-burstuser2,-mallory Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE")


def test_the_reservation_is_read_from_the_listing_of_all_reservations():
    from burstd.domain.partition_access import CloudReservation
    from burstd.slurm.access import parse_reservation

    assert parse_reservation("No reservations in the system", "burstd_c1") is None
    assert parse_reservation("ReservationName=other Nodes=x1 Users=bob\n" + RESV, "burstd_c1") == CloudReservation(
        ("cloud1", "cloud2", "cloud3", "cloud4"), ("burstuser2", "mallory"))
    with pytest.raises(SlurmError):  # an allow list under our name is not ours
        parse_reservation("ReservationName=burstd_c1 Nodes=cloud1 Users=bob", "burstd_c1")


def test_a_new_deny_list_is_a_delete_and_a_magnetic_create_with_checked_names():
    from burstd.domain.partition_access import CloudReservation

    r = Recorder()
    r.set_cloud_reservation("burstd_c1", CloudReservation(("cloud1", "cloud2"), ("a", "b")), exists=True)
    r.set_cloud_reservation("burstd_c1", None, exists=True)
    assert r.calls == [
        ["scontrol", "delete", "ReservationName=burstd_c1"],
        ["scontrol", "create", "reservation", "ReservationName=burstd_c1", "Nodes=cloud[1-2]", "StartTime=now",
         "Duration=infinite", "Users=-a,-b", "Flags=MAGNETIC"],
        ["scontrol", "delete", "ReservationName=burstd_c1"],
    ]
    with pytest.raises(ValueError):
        r.set_cloud_reservation("x y", None, exists=True)


def test_the_reservations_account_list_and_the_root_only_reservation_read_back_as_written():
    from burstd.domain.partition_access import CloudReservation
    from burstd.slurm.access import parse_reservation

    line = "ReservationName=burstd_c1 Nodes=cloud[1-2] Users=-bob Accounts=physics,funded Flags=SPEC_NODES,MAGNETIC"
    assert parse_reservation(line, "burstd_c1") == CloudReservation(("cloud1", "cloud2"), ("bob",),
                                                                    ("funded", "physics"))
    root_only = parse_reservation("ReservationName=burstd_c1 Nodes=cloud1 Users=root Accounts=root", "burstd_c1")
    assert root_only == CloudReservation(("cloud1",), (), ()) and root_only.root_only
    with pytest.raises(SlurmError):  # an account deny list under our name is not ours
        parse_reservation("ReservationName=burstd_c1 Nodes=cloud1 Accounts=-broke", "burstd_c1")


def test_an_account_list_is_written_with_checked_names_and_changed_in_place():
    from burstd.domain.partition_access import CloudReservation

    r = Recorder()
    r.set_cloud_reservation("burstd_c1", CloudReservation(("cloud1",), (), ("funded", "physics")), exists=False)
    r.set_cloud_reservation("burstd_c1", CloudReservation(("cloud1",), ("bob",), ()), exists=True)
    r.update_reservation_accounts("burstd_c1", ["funded"])
    assert r.calls == [
        ["scontrol", "create", "reservation", "ReservationName=burstd_c1", "Nodes=cloud1", "StartTime=now",
         "Duration=infinite", "Accounts=funded,physics", "Flags=MAGNETIC"],
        ["scontrol", "delete", "ReservationName=burstd_c1"],
        # no account may burst: only root's own jobs charged to root (Slurm takes no empty list)
        ["scontrol", "create", "reservation", "ReservationName=burstd_c1", "Nodes=cloud1", "StartTime=now",
         "Duration=infinite", "Users=root", "Accounts=root", "Flags=MAGNETIC"],
        ["scontrol", "update", "ReservationName=burstd_c1", "Accounts=funded"],
    ]
    with pytest.raises(ValueError):
        r.update_reservation_accounts("burstd_c1", ["funded,physics"])
    with pytest.raises(ValueError):
        r.update_reservation_accounts("burstd_c1", [])
