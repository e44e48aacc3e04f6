"""Each pending job's data declaration, read once from its batch script through Slurm (the adapter's
``batch_script``, ``scontrol write batch_script``) and kept while the job is known: the ``DataView`` the cycle
hands ``decide()`` (``burstd.policy.data_cost``).

A script whose directives cannot be parsed is refused the cloud: it is recorded as never leaving (its data could
not be staged as written) and the error is logged once, naming the job and the line. A job the adapter cannot
read a script for (an ``--wrap`` job still has one; a backend without ``batch_script`` has none) counts as having
declared nothing, so its burst explanation says its paths are not on the cloud node. At most ``max_reads``
scripts are read a cycle (each is a Slurm call); a job not yet read stays on-prem until it is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from burstd.daemon.logging import ev, get_logger
from burstd.domain.data import NO_DATA, DataNeeds
from burstd.domain.data_directives import DataDirectiveError, parse_data_directives
from burstd.domain.slurm import Snapshot
from burstd.policy.data_cost import DataView

log = get_logger("data")

# a job whose declaration is unusable, or not read yet, does not leave the site
REFUSED = DataNeeds(held="its data directives were refused (burstd's log names the line)")
UNREAD = DataNeeds(held="its batch script is not read yet")


class JobDataNeeds:
    """``reader(job_id) -> script text`` (None: no reader, every job declared nothing)."""

    def __init__(self, reader: Callable[[int], str] | None, max_reads: int = 200):
        self.reader = reader
        self.max_reads = max_reads
        self.known: dict[int, DataNeeds] = {}
        self.errors: dict[int, str] = {}

    def view(self, snapshot: Snapshot, near: Mapping[str, Collection[str]] | None = None) -> DataView | None:
        """The declarations of the snapshot's pending jobs (None without a reader: decide() then applies only
        the never-leave accounts). ``near``: cache keys present per pool (the pool caches', burstd.data)."""
        if self.reader is None:
            return None
        pending = [j.job_id for j in snapshot.jobs if j.state == "PENDING"]
        reads = 0
        needs: dict[int, DataNeeds] = {}
        for jid in pending:
            got = self.known.get(jid)
            if got is None and reads < self.max_reads:
                reads += 1
                got = self.known[jid] = self._read(jid)
            needs[jid] = got if got is not None else UNREAD
        for jid in set(self.known) - {j.job_id for j in snapshot.jobs}:  # ended: forget
            self.known.pop(jid, None)
            self.errors.pop(jid, None)
        return DataView(needs, near or {})

    def _read(self, jid: int) -> DataNeeds:
        assert self.reader is not None
        try:
            script = self.reader(jid)
        except Exception as exc:  # noqa: BLE001 - no script (or Slurm said no): it declared nothing we can read
            log.info("no batch script for job", extra=ev(job_id=jid, error=str(exc)))
            return NO_DATA
        try:
            return parse_data_directives(script, source=f"job {jid}'s batch script")
        except DataDirectiveError as exc:
            self.errors[jid] = str(exc)
            log.warning("job's data directives refused: it stays on-prem", extra=ev(job_id=jid, error=str(exc)))
            return REFUSED
