"""Training jobs' latest progress reports (issue 26): the daemon's ``ProgressBook`` keeps each job's record here as
it arrives, so a restarted daemon still shows it and still weighs the work the job reported. The record is the book's own JSON; this module only stores it by job, and forgets what is stale."""

from __future__ import annotations

from sqlalchemy import select

from burstd.db.engine import StoreBase, _now
from burstd.db.rows import _job_progress

KEEP_S = 31 * 86400  # a report older than this goes at the next save (``burstctl jobs`` looks 30 days back)


class ProgressRecords(StoreBase):
    def save_progress(self, job_id: int, record: str, *, at: float | None = None) -> None:
        at = _now(at)
        with self._write() as conn:
            self._upsert(conn, _job_progress, ["job_id"], {"job_id": int(job_id), "record": record,
                                                            "updated_at": at})
            conn.execute(_job_progress.delete().where(_job_progress.c.updated_at < at - KEEP_S))

    def progress_records(self, limit: int) -> list[str]:
        """The newest ``limit`` records, oldest first (the order the book keeps them in)."""
        with self._read() as conn:
            rows = conn.execute(select(_job_progress.c.record).order_by(_job_progress.c.updated_at.desc(),
                                                                         _job_progress.c.job_id.desc())
                                .limit(limit)).all()
        return [r.record for r in reversed(rows)]
