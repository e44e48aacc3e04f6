"""The head side of a burst job's data: when the cycle bursts a job that declared inputs, they are pushed to the
object store near its pool (``burstd.data.staging.stage_in``, through the pool's cache), on a worker thread.

The cycle only calls ``submit`` (record and enqueue: it never waits on a transfer). The worker moves one job at a
time (the link is the bottleneck; jobs side by side would only share it), keeps each pool's cache index as JSON
under ``<daemon.state_dir>/data/``, writes a progress record per input under ``<daemon.state_dir>/staging/``
(``burstctl data progress FILE``), and books what crossed the link with ``book_transfer`` and the byte-time the
cache kept with ``book_storage`` to the job's account. ``staged(job)`` is what the node side asks for: each input's
on-prem path and dataset digest.

An input is read only if the job's user could read it on-prem (every directory on the way searchable, every file
readable, by owner, group or other bits): the daemon reads as root, and a declaration must not let a user copy
out a file they could not open themselves.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from burstd.config import Config, PoolDataConfig
from burstd.daemon.data_spend import DataSpendLedger, book_storage, book_transfer
from burstd.daemon.logging import ev, get_logger
from burstd.daemon.metrics import Metrics
from burstd.data.cache import PoolCache, StorageUsage
from burstd.data.objectstore import S3Store, s3_client
from burstd.data.progress import Progress, ProgressFile
from burstd.data.staging import stage_in
from burstd.domain.data import GB, DataItem, DataNeeds

log = get_logger("data")

IN_FLIGHT_SAVE_S = 1.0  # how often a running transfer's bytes so far are written to the database
UNBOUNDED_CACHE_BYTES = 1 << 62  # cache_gb = 0: the store keeps what was staged, bounded by nothing but the bill
State = Literal["queued", "running", "done", "failed"]


class NotReadableError(PermissionError):
    """The job's user could not read a declared input on-prem."""


@dataclass(frozen=True)
class StagedInput:
    path: str  # the on-prem path the job declared (and reads on the node)
    dataset: str  # the manifest digest in the pool's store (64 hex)
    bytes_moved: int
    cache_hit: bool


@dataclass
class JobStaging:
    job_id: int
    pool: str
    account: str
    user: str
    state: State = "queued"
    inputs: list[StagedInput] = field(default_factory=list)
    error: str = ""
    outputs: tuple[str, ...] = ()  # declared on-prem paths; the node publishes output i as label out-<i>
    outputs_state: Literal["", "queued", "done", "failed"] = ""
    outputs_verified: int = 0
    outputs_error: str = ""
    declared: tuple[str, ...] = ()  # the declared inputs' on-prem paths: what a restarted daemon stages again
    # the transfer under way: its booking key and the bytes that crossed the link so far (kept every
    # IN_FLIGHT_SAVE_S), so a daemon killed mid-transfer still books them when it restarts, under the same key
    in_flight_key: str = ""
    in_flight_bytes: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobStaging:
        doc = json.loads(text)
        doc["inputs"] = [StagedInput(**i) for i in doc.get("inputs", [])]
        doc["outputs"], doc["declared"] = tuple(doc.get("outputs", ())), tuple(doc.get("declared", ()))
        return cls(**doc)


@runtime_checkable
class StagingRecordStore(Protocol):
    """Where the stager keeps its job records (``burstd.db.staging_records``): a restarted daemon resumes them."""

    def save_staging(self, job_id: int, pool: str, record: str, *, at: float | None = None) -> None: ...

    def staging_records(self) -> dict[int, str]: ...

    def drop_staging(self, job_id: int) -> None: ...


def user_can_read(path: Path, user: str) -> None:
    """Raise NotReadableError unless ``user`` could open every file under ``path`` (and reach it) on-prem."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise NotReadableError(f"{path}: job user {user!r} is unknown on the head node") from None
    uid, gids = pw.pw_uid, set(os.getgrouplist(user, pw.pw_gid))
    if uid == 0:
        return

    def allowed(st: os.stat_result, bits: tuple[int, int, int]) -> bool:
        if st.st_uid == uid:
            return bool(st.st_mode & bits[0])
        if st.st_gid in gids:
            return bool(st.st_mode & bits[1])
        return bool(st.st_mode & bits[2])

    read, search = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH), (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    for parent in reversed(path.parents):
        if not allowed(parent.stat(), search):
            raise NotReadableError(f"{path}: user {user!r} cannot reach it ({parent} is not searchable for them)")
    todo = [path]
    while todo:
        p = todo.pop()
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue  # a manifest never follows symlinks
        if stat.S_ISDIR(st.st_mode):
            if not (allowed(st, read) and allowed(st, search)):
                raise NotReadableError(f"{path}: user {user!r} cannot list {p}")
            todo.extend(p.iterdir())
        elif not allowed(st, read):
            raise NotReadableError(f"{path}: user {user!r} cannot read {p}")


def _cache_bytes(data: PoolDataConfig) -> int:
    return int(data.cache_gb * GB) or UNBOUNDED_CACHE_BYTES


class _AccountMeter:
    """The pool cache's StorageMeter: byte-time booked to the account whose staging reported it."""

    def __init__(self, stager: DataStager, pool: str):
        self.stager, self.pool, self.account = stager, pool, ""

    def record_storage(self, usages: list[StorageUsage]) -> None:
        for u in usages:
            if u.end > u.start and self.account:
                book_storage(self.stager.ledger, self.stager.config, key=f"cache-{u.pool}-{u.digest}-{u.start:.0f}",
                             account=self.account, pool=u.pool, n_bytes=u.size_bytes, seconds=u.end - u.start,
                             at=u.end, metrics=self.stager.metrics)


class DataStager:
    """``store_for(pool) -> S3Store`` (default: the pool's ``[pools.data]`` store keys)."""

    def __init__(self, config: Config, ledger: DataSpendLedger, metrics: Metrics | None = None,
                 store_for: Callable[[str], S3Store] | None = None, clock: Callable[[], float] = time.time):
        self.config, self.ledger, self.metrics, self.clock = config, ledger, metrics, clock
        self.pools = {p.name: p.data for p in config.pools if p.data.store_bucket}
        self.store_for = store_for or self._store
        root = Path(config.daemon.state_dir)
        self.cache_dir, self.progress_dir = root / "data", root / "staging"
        self.jobs: dict[int, JobStaging] = {}
        self._lock = threading.Lock()
        self._stores: dict[str, S3Store] = {}
        self._caches: dict[str, tuple[PoolCache, _AccountMeter]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.records = ledger if isinstance(ledger, StagingRecordStore) else None
        self._resume()

    def _resume(self) -> None:
        """A restarted daemon's records: a staging it was making runs again (the cache and the store's unfinished
        uploads keep what had crossed), outputs it was bringing home are fetched when their job has left."""
        if self.records is None:
            return
        for jid, text in self.records.staging_records().items():
            try:
                job = JobStaging.from_json(text)
            except (ValueError, TypeError, KeyError) as exc:
                log.error("staging record unreadable, dropped", extra=ev(job_id=jid, error=str(exc)))
                self.records.drop_staging(jid)
                continue
            if job.outputs_state == "queued":
                job.outputs_state = ""  # forget() queues it again once the job is seen gone
            self.jobs[jid] = job
            self._book_killed_attempt(job)
            if job.state in ("queued", "running") and job.pool in self.pools:
                job.state, job.inputs = "queued", []
                needs = DataNeeds(inputs=tuple(DataItem(p) for p in job.declared),
                                  outputs=tuple(DataItem(p) for p in job.outputs))
                self._executor().submit(self._run, job, needs)
                log.info("staging resumed after a restart", extra=ev(job_id=jid, pool=job.pool))

    def _book_killed_attempt(self, job: JobStaging) -> None:
        """The bytes a killed daemon's transfer had sent (as last saved) are booked under that attempt's own key:
        if the attempt had booked them itself before dying, the same key books nothing more."""
        if not job.in_flight_key:
            return
        try:
            book_transfer(self.ledger, self.config, key=job.in_flight_key, account=job.account, pool=job.pool,
                          n_bytes=job.in_flight_bytes, direction="in", job_id=job.job_id, user=job.user,
                          at=self.clock(), metrics=self.metrics)
        except Exception as exc:  # noqa: BLE001 - a pool gone from the config has no price: logged, not fatal
            log.error("killed attempt's transfer not booked", extra=ev(job_id=job.job_id, key=job.in_flight_key,
                                                                      n_bytes=job.in_flight_bytes, error=str(exc)))
            return
        log.info("killed attempt's transfer booked", extra=ev(job_id=job.job_id, key=job.in_flight_key,
                                                               n_bytes=job.in_flight_bytes))
        job.in_flight_key, job.in_flight_bytes = "", 0
        self._persist(job)

    def _persist(self, job: JobStaging) -> None:
        if self.records is not None:
            self.records.save_staging(job.job_id, job.pool, job.to_json(), at=self.clock())

    # --- the cycle's side: fast -----------------------------------------------------------------
    def stages(self, pool: str) -> bool:
        return pool in self.pools

    def submit(self, job_id: int, pool: str, account: str, user: str, needs: DataNeeds) -> Future[None] | None:
        """Queue the job's declared inputs for ``pool`` (once per job and pool; None: nothing to move now)."""
        if not (needs.inputs or needs.outputs) or pool not in self.pools:
            return None
        with self._lock:
            got = self.jobs.get(job_id)
            if got is not None and got.pool == pool and got.state != "failed":
                return None
            self.jobs[job_id] = job = JobStaging(job_id, pool, account, user,
                                                 outputs=tuple(o.path for o in needs.outputs),
                                                 declared=tuple(i.path for i in needs.inputs))
            if not needs.inputs:  # outputs only: nothing to push, the record is what the node's epilog asks
                job.state = "done"
            self._persist(job)
            if not needs.inputs:
                return None
            return self._executor().submit(self._run, job, needs)

    def staged(self, job_id: int) -> JobStaging | None:
        with self._lock:
            return self.jobs.get(job_id)

    def forget(self, job_ids: set[int]) -> None:
        """Jobs no longer in the queue: their declared outputs are fetched home (once), then their records go."""
        with self._lock:
            for jid in job_ids & set(self.jobs):
                job = self.jobs[jid]
                if job.outputs and job.state == "done" and not job.outputs_state:
                    job.outputs_state = "queued"
                    self._persist(job)
                    self._executor().submit(self._fetch, job)
                elif job.state in ("done", "failed") and job.outputs_state in ("", "done", "failed"):
                    del self.jobs[jid]
                    if self.records is not None:
                        self.records.drop_staging(jid)

    def fetch_outputs(self, job_id: int) -> Future[None] | None:
        """Bring a finished job's declared outputs home now (what ``forget`` queues when the job leaves)."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or not job.outputs:
                return None
            job.outputs_state = "queued"
            return self._executor().submit(self._fetch, job)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:  # made on first use: a daemon whose jobs declare nothing starts no thread
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="burstd-stage")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    # --- the worker's side ----------------------------------------------------------------------
    def _store(self, pool: str) -> S3Store:
        if pool not in self._stores:
            data = self.pools[pool]
            assert data.store_bucket is not None
            store = S3Store(s3_client(data.store_endpoint, data.store_region), data.store_bucket)
            store.ensure_bucket()
            self._stores[pool] = store
        return self._stores[pool]

    def _cache(self, pool: str) -> tuple[PoolCache, _AccountMeter]:
        if pool not in self._caches:
            meter = _AccountMeter(self, pool)
            index = self.cache_dir / f"cache-{pool}.json"
            if index.exists():
                cache = PoolCache.from_json(index.read_text(), meter, where=str(index))
                cache.capacity_bytes = _cache_bytes(self.pools[pool])  # the config may have changed
            else:
                cache = PoolCache(pool, _cache_bytes(self.pools[pool]), meter)
            self._caches[pool] = (cache, meter)
        return self._caches[pool]

    def _save(self, cache: PoolCache) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        index = self.cache_dir / f"cache-{cache.pool}.json"
        tmp = index.with_suffix(".json.tmp")
        tmp.write_text(cache.to_json())
        os.replace(tmp, index)

    def _keep(self, pool: str, job_id: int) -> frozenset[str]:
        """Blobs other queued or running stagings on the pool read: never evicted for this one."""
        cache, _ = self._cache(pool)
        with self._lock:
            keys = [f"sha256:{i.dataset}" for j in self.jobs.values()
                    if j.pool == pool and j.job_id != job_id and j.state == "done" for i in j.inputs]
        return frozenset(b for k in keys for b in cache.datasets.get(k, ()))

    def _fetch(self, job: JobStaging) -> None:
        """Each declared output from the store to its on-prem path, verified, written as the job's user."""
        data = self.pools[job.pool]
        try:
            self.progress_dir.mkdir(parents=True, exist_ok=True)
            pw = pwd.getpwnam(job.user)
            as_user = os.getuid() == 0 and pw.pw_uid != 0  # never root-owned files in a user's folder
            job_dir = self.progress_dir / str(job.job_id)  # the user's process writes its progress records here
            job_dir.mkdir(mode=0o755, exist_ok=True)
            if as_user:
                os.chown(job_dir, pw.pw_uid, pw.pw_gid)
            for i, path in enumerate(job.outputs):
                # a user_python runs as the user from the start; without one the daemon's own Python (which the
                # user may not be able to read) loads as root and takes the user's ids before touching a file
                python = self.config.data.user_python
                switch = as_user and python is None
                cmd = [python or sys.executable, "-m", "burstd.data", "fetch-outputs",
                       "--bucket", str(data.store_bucket),
                       "--job", str(job.job_id), "--label", f"out-{i}", "--dest", path,
                       "--progress", str(job_dir / f"out-{i}.json")]
                cmd += ["--endpoint-url", data.store_endpoint] if data.store_endpoint else []
                cmd += ["--region", data.store_region] if data.store_region else []
                cmd += [f"--as-user={job.user}"] if switch else []  # one argument: a name cannot pass as a flag
                spawn_as_user = as_user and not switch
                out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=24 * 3600,
                                     user=pw.pw_uid if spawn_as_user else None,
                                     group=pw.pw_gid if spawn_as_user else None,
                                     extra_groups=os.getgrouplist(job.user, pw.pw_gid) if spawn_as_user else None)
                if out.returncode != 0:
                    raise RuntimeError(f"{path}: fetch-outputs exited {out.returncode}: {out.stderr.strip()[-300:]}")
                n_bytes = int(json.loads(out.stdout)["bytes"])
                book_transfer(self.ledger, self.config, key=f"xfer-{job.job_id}-out-{i}", account=job.account,
                              pool=job.pool, n_bytes=n_bytes, direction="out", job_id=job.job_id, user=job.user,
                              at=self.clock(), metrics=self.metrics)
                job.outputs_verified += 1
            job.outputs_state = "done"
            self._persist(job)
            log.info("job's outputs home, verified", extra=ev(job_id=job.job_id, outputs=job.outputs_verified))
        except Exception as exc:  # noqa: BLE001 - recorded and logged: the outputs stay in the store
            job.outputs_error, job.outputs_state = f"{type(exc).__name__}: {exc}", "failed"
            self._persist(job)
            log.error("job's outputs not brought home", extra=ev(job_id=job.job_id, error=job.outputs_error))

    def _keeper(self, job: JobStaging) -> Callable[[Progress], None]:
        """A progress hook that saves the bytes crossed so far into the job's record, at most every
        IN_FLIGHT_SAVE_S (and not while they have not changed)."""
        saved_at = [float("-inf")]

        def keep(record: Progress) -> None:
            crossed = record.bytes_done - record.bytes_reused
            if crossed != job.in_flight_bytes and self.clock() - saved_at[0] >= IN_FLIGHT_SAVE_S:
                job.in_flight_bytes, saved_at[0] = crossed, self.clock()
                self._persist(job)

        return keep

    def _run(self, job: JobStaging, needs: DataNeeds) -> None:
        job.state, job.inputs = "running", []
        self._persist(job)
        attempt = time.time_ns() // 1_000_000  # each attempt books what crossed the link in it, once
        try:
            store = self.store_for(job.pool)
            cache, meter = self._cache(job.pool)
            meter.account = job.account
            self.progress_dir.mkdir(parents=True, exist_ok=True)
            for i, item in enumerate(needs.inputs):
                src = Path(item.path)
                user_can_read(src, job.user)
                key = f"xfer-{job.job_id}-in-{i}-{attempt}"
                job.in_flight_key, job.in_flight_bytes = key, 0
                self._persist(job)
                progress = ProgressFile(self.progress_dir / f"{job.job_id}-in-{i}.json", "in", clock=self.clock,
                                        on_write=self._keeper(job))
                try:
                    result = stage_in(store, cache, src, progress, keep=self._keep(job.pool, job.job_id),
                                      now=self.clock())
                finally:
                    self._save(cache)
                    # a cut link still billed the bytes that crossed before it broke: booked whatever the outcome
                    crossed = progress.record.bytes_done - progress.record.bytes_reused
                    book_transfer(self.ledger, self.config, key=key, account=job.account, pool=job.pool,
                                  n_bytes=crossed, direction="in", job_id=job.job_id, user=job.user,
                                  at=self.clock(), metrics=self.metrics)
                    job.in_flight_key, job.in_flight_bytes = "", 0  # saved with the next state change
                job.inputs.append(StagedInput(item.path, result.manifest.digest, result.bytes_moved,
                                              result.cache_hit))
            cache.report(self.clock())
            job.state = "done"
            self._persist(job)
            log.info("job's inputs staged near its pool", extra=ev(
                job_id=job.job_id, pool=job.pool, bytes_moved=sum(i.bytes_moved for i in job.inputs),
                cache_hits=sum(i.cache_hit for i in job.inputs)))
        except Exception as exc:  # noqa: BLE001 - recorded; the next decision to burst it submits it again
            job.error, job.state = f"{type(exc).__name__}: {exc}", "failed"
            self._persist(job)
            log.warning("job's inputs not staged", extra=ev(job_id=job.job_id, pool=job.pool, error=job.error))
