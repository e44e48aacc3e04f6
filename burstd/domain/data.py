"""What a job reads and writes, as burstd sees it: the value types of a job's data declaration.

A job declares its data in its batch script (``burstd.domain.data_directives`` parses it; docs/researchers.md
shows the forms). ``DataNeeds`` is the parsed result: the inputs that must reach a cloud node before the job
starts, the outputs that must come home after it ends, and whether the data may leave the site at all.
Sizes are bytes (``None``: not declared; the daemon may stat the path), digests are ``sha256:<hex>`` when known.
Pure values: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 10**9  # prices are per GB (10^9 bytes), as every cloud bills transfer


@dataclass(frozen=True, slots=True)
class DataItem:
    """One declared path: an input (staged in) or an output (staged out)."""

    path: str  # absolute on-prem path
    size_bytes: int | None = None
    digest: str | None = None  # "sha256:<64 hex>"

    @property
    def cache_key(self) -> str:
        """What identifies this data in a pool's cache: its content digest, else its path."""
        return self.digest or self.path


@dataclass(frozen=True, slots=True)
class DataNeeds:
    """A job's data: what it reads (inputs), what it writes (outputs), and whether it may leave the site."""

    inputs: tuple[DataItem, ...] = ()
    outputs: tuple[DataItem, ...] = ()
    never_leaves: bool = False
    # why it stays home when not by its own declaration (directives refused, script not read yet); "" = none
    held: str = ""

    @property
    def declared(self) -> bool:
        return bool(self.inputs or self.outputs or self.never_leaves or self.held)

    @property
    def input_bytes(self) -> int:
        return sum(i.size_bytes or 0 for i in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(o.size_bytes or 0 for o in self.outputs)


NO_DATA = DataNeeds()

# What a job that declares nothing is told when it bursts (its paths exist only on the on-prem filesystem).
UNDECLARED_NOTICE = (
    "this job runs on a cloud node and declared no data: on-prem paths (home, project and scratch filesystems) "
    "do not exist there unless the script declares them with '#BURSTD stage-in PATH' / '#BURSTD stage-out PATH' "
    "(docs/researchers.md); add '#BURSTD data-never-leaves' or --comment=burst:no to keep it on-prem"
)


def never_leave_path(needs: DataNeeds, prefixes: tuple[str, ...] | list[str]) -> str:
    """The first declared path under a site-wide never-leave prefix, or "" (a prefix matches whole components)."""
    for item in (*needs.inputs, *needs.outputs):
        for prefix in prefixes:
            p = prefix.rstrip("/") or "/"
            if item.path == p or item.path.startswith(p if p == "/" else p + "/"):
                return item.path
    return ""


@dataclass(frozen=True, slots=True)
class DataMove:
    """What bursting one job to one pool means for its data (``burstd.policy.data_cost.data_move``)."""

    pool: str
    bytes_in: int  # inputs to move to the pool (not already near it)
    bytes_cached: int  # inputs already near the pool (same digest, or same path): not moved again
    bytes_out: int  # declared outputs to bring home
    stage_in_s: float  # the inputs' transfer time over the pool's link: added to the job's start
    transfer_micros: int  # in and out, at the pool's per-GB prices
    storage_micros: int  # the staged data kept near the pool while the job runs

    @property
    def cost_micros(self) -> int:
        return self.transfer_micros + self.storage_micros

    @property
    def moves_anything(self) -> bool:
        return bool(self.bytes_in or self.bytes_out or self.cost_micros)


def format_bytes(n: int) -> str:
    """``180 GB``, ``1.2 TB``, ``512 MB`` (decimal units, as the prices are quoted)."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class DataSpend:
    """One booked data cost: a finished transfer (``transfer_in`` / ``transfer_out``) or storage near a pool.
    ``key`` identifies it (a transfer's id): booking the same key twice books it once."""

    key: str
    kind: str  # burstd.domain.money.DATA_SPEND_KINDS
    pool: str
    account: str
    n_bytes: int
    at: float
    cost_micros: int
    job_id: int | None = None
    user: str | None = None
