"""The cloud gate's readers of Slurm output (issue 21 item 1), fed hostile text by hypothesis: a partition's account
lists and burstd's reservation. Each returns a value or raises SlurmError; what it returns holds only names that
cannot carry a Slurm setting of their own, so reading a list back and writing it again never injects one. Seeds are
the 22.05 bed's own lines."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.domain.partition_access import is_slurm_name
from burstd.slurm.access import PartitionAccessMixin, parse_partition_access, parse_reservation
from burstd.slurm.base import SlurmError

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARTITION = ("PartitionName=cloud AllowGroups=ALL DenyAccounts=broke,physics AllowQos=ALL AllocNodes=ALL "
             "Default=NO Nodes=cloud[1-4] State=UP TotalCPUs=8")
RESERVATION = ("ReservationName=burstd_c StartTime=2026-11-26T22:04:26 Nodes=cloud[1-4] NodeCnt=4 "
               "Flags=SPEC_NODES,MAGNETIC Users=-burstuser2 Groups=(null) Accounts=funded,physics State=ACTIVE")

tokens = st.one_of(
    st.sampled_from(["AllowAccounts=", "DenyAccounts=", "Users=", "Accounts=", "root", "Nodes=", "PartitionName=cloud",
                     "ReservationName=burstd_c", ",", "=", "-", " ", "\n", "ALL", "(null)", "cloud[1-", "]"]),
    st.text(max_size=12),
)
hostile = st.lists(tokens, max_size=30).map("".join)


def _mutated(seed: str, data) -> str:
    text = seed
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 8))
        text = text[:at] + data.draw(hostile) + text[at + cut:]
    return text


class _Echo(PartitionAccessMixin):
    def __init__(self) -> None:
        self.argv: list[list[str]] = []

    def run(self, cmd, args):
        self.argv.append(list(args))
        return ""


@FUZZ
@given(st.data())
def test_a_partition_listing_reads_as_safe_names_or_a_slurm_error(data):
    text = _mutated(PARTITION, data) if data.draw(st.booleans()) else data.draw(hostile)
    try:
        got = parse_partition_access(text, "cloud")
    except SlurmError:
        return
    for names in (got.allow or (), got.deny or ()):
        assert all(is_slurm_name(n) for n in names)
    echo = _Echo()
    echo.set_partition_access("cloud", got)  # written back as read: one setting each, nothing more
    (argv,) = echo.argv
    assert len(argv) == 4 and all("\n" not in a and " " not in a for a in argv)


@FUZZ
@given(st.data())
def test_a_reservation_listing_reads_as_safe_names_or_a_slurm_error(data):
    text = _mutated(RESERVATION, data) if data.draw(st.booleans()) else data.draw(hostile)
    try:
        got = parse_reservation(text, "burstd_c")
    except SlurmError:
        return
    if got is not None:
        assert all(is_slurm_name(u) for u in got.denied_users)
        assert got.accounts is None or all(is_slurm_name(a) and not a.startswith("-") for a in got.accounts)
