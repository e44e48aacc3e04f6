"""Burst jobs' staging records (issue 24): the daemon's data stager keeps each job's record here as it changes,
so a daemon restarted mid-transfer resumes it and still answers the node's prolog. The record is the stager's own
JSON; this module only stores it by job."""

from __future__ import annotations

from sqlalchemy import select

from burstd.db.engine import StoreBase, _now
from burstd.db.rows import _data_staging


class StagingRecords(StoreBase):
    def save_staging(self, job_id: int, pool: str, record: str, *, at: float | None = None) -> None:
        with self._write() as conn:
            self._upsert(conn, _data_staging, ["job_id"],
                         {"job_id": int(job_id), "pool": pool, "record": record, "updated_at": _now(at)})

    def staging_records(self) -> dict[int, str]:
        with self._read() as conn:
            rows = conn.execute(select(_data_staging).order_by(_data_staging.c.job_id)).all()
        return {int(r.job_id): r.record for r in rows}

    def drop_staging(self, job_id: int) -> None:
        with self._write() as conn:
            conn.execute(_data_staging.delete().where(_data_staging.c.job_id == int(job_id)))
