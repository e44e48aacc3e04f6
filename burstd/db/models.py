"""burstd's tables (SQLModel). Only ``burstd.db.store`` and the Alembic migrations import this module.

Conventions: times are Unix seconds (float, UTC); money is integer micro-dollars in BIGINT columns;
lease ids are uuid4 hex strings. Every schema change here needs an Alembic revision in
``burstd/db/migrations/versions/`` (``tests/unit/db/test_migrations.py`` fails until the two agree).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Column, Float, ForeignKey, Index, MetaData, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(SQLModel):
    """Our own metadata, so other SQLModel tables (if any) never leak into the migrations."""

    metadata = MetaData(naming_convention=NAMING)


class LeaseRow(Base, table=True):
    __tablename__ = "lease"
    __table_args__ = (
        Index("ix_lease_state", "state"),
        Index("ix_lease_node_name_created_at", "node_name", "created_at"),
    )

    id: str = Field(sa_column=Column(String(32), primary_key=True))
    pool: str = Field(sa_column=Column(String(64), nullable=False))
    node_name: str = Field(sa_column=Column(String(128), nullable=False))
    # node_name while the lease is open (not TERMINATED/REFUSED), NULL after: a unique column, so the
    # database itself refuses a second open lease for one Slurm node (NULLs never collide).
    open_node: str | None = Field(default=None, sa_column=Column(String(128), nullable=True, unique=True))
    state: str = Field(sa_column=Column(String(16), nullable=False))
    market: str = Field(default="spot", sa_column=Column(String(16), nullable=False))
    instance_id: str | None = Field(default=None, sa_column=Column(String(256), nullable=True))
    offering: str | None = Field(default=None, sa_column=Column(String(256), nullable=True))
    price_per_hour_micros: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    account: str = Field(default="", sa_column=Column(String(64), nullable=False))
    job_ids: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    launched_at: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    ready_at: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    ended_at: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    state_since: float = Field(sa_column=Column(Float, nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    attempt: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    accrued_until: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    # leases launched together, all or nothing (revision 0003): the gang leader's lease id
    gang: str | None = Field(default=None, sa_column=Column(String(32), nullable=True, index=True))
    # bumped on every write: a cheap change counter for readers that poll
    version: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class LeaseEventRow(Base, table=True):
    """The admin-readable log: one row per transition (and per field update or note) of a lease."""

    __tablename__ = "lease_event"
    __table_args__ = (
        Index("ix_lease_event_lease_id_at", "lease_id", "at"),
        Index("ix_lease_event_at", "at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    lease_id: str = Field(sa_column=Column(String(32), ForeignKey("lease.id"), nullable=False))
    at: float = Field(sa_column=Column(Float, nullable=False))
    from_state: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    to_state: str = Field(sa_column=Column(String(16), nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    extra: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class BudgetRow(Base, table=True):
    """A spending limit for one account (or the site, account = ``burstd.domain.budget.SITE``) per period."""

    __tablename__ = "budget"

    account: str = Field(sa_column=Column(String(64), primary_key=True))
    period: str = Field(sa_column=Column(String(8), primary_key=True))
    limit_micros: int = Field(sa_column=Column(BigInteger, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class SpendIntervalRow(Base, table=True):
    """The spend ledger: a lease's cost split into intervals, each charged to a job or to overhead."""

    __tablename__ = "spend_interval"
    __table_args__ = (
        Index("ix_spend_interval_start", "start"),
        Index("ix_spend_interval_account_start", "account", "start"),
        Index("ix_spend_interval_lease_id", "lease_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    lease_id: str = Field(sa_column=Column(String(32), ForeignKey("lease.id"), nullable=False))
    pool: str = Field(sa_column=Column(String(64), nullable=False))
    account: str = Field(sa_column=Column(String(64), nullable=False))
    user: str | None = Field(default=None, sa_column=Column(String(64), nullable=True))
    job_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))  # NULL = overhead
    start: float = Field(sa_column=Column(Float, nullable=False))
    end: float = Field(sa_column=Column(Float, nullable=False))
    price_per_hour_micros: int = Field(sa_column=Column(BigInteger, nullable=False))
    cost_micros: int = Field(sa_column=Column(BigInteger, nullable=False))


class DataSpendRow(Base, table=True):
    """The data side of the spend ledger: a transfer to or from a pool, or storage kept near it, booked to the
    job's account like compute (``LedgerRecords.book_data_spend``). ``key`` makes a booking idempotent: the
    transfer engine books each finished transfer once, whatever it retries."""

    __tablename__ = "data_spend"
    __table_args__ = (Index("ix_data_spend_account_at", "account", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(sa_column=Column(String(128), nullable=False, unique=True))
    kind: str = Field(sa_column=Column(String(16), nullable=False))  # transfer_in, transfer_out, storage
    pool: str = Field(sa_column=Column(String(64), nullable=False))
    account: str = Field(sa_column=Column(String(64), nullable=False))
    user: str | None = Field(default=None, sa_column=Column(String(64), nullable=True))
    job_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    n_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    at: float = Field(sa_column=Column(Float, nullable=False))
    cost_micros: int = Field(sa_column=Column(BigInteger, nullable=False))


class DataStagingRow(Base, table=True):
    """A burst job's staging record (``burstd.daemon.data_staging.JobStaging``) as JSON, so a restarted daemon
    resumes a transfer it was making and still answers the node's prolog (issue 24)."""

    __tablename__ = "data_staging"

    job_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    pool: str = Field(sa_column=Column(String(64), nullable=False))
    record: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class JobProgressRow(Base, table=True):
    """A training job's latest progress report (``burstd.daemon.job_progress.JobProgress``) as JSON, so a restarted
    daemon still shows it and still weighs the work it reported (issue 26)."""

    __tablename__ = "job_progress"

    job_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    record: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False, index=True))


class AllocationRow(Base, table=True):
    """A job's stay on a lease's node [start, end), as Slurm reported it: who the ledger charges (revision 0002).
    A job requeued onto the same node again gets a second row (another start)."""

    __tablename__ = "lease_allocation"
    __table_args__ = (UniqueConstraint("lease_id", "job_id", "start"),)

    id: int | None = Field(default=None, primary_key=True)
    lease_id: str = Field(sa_column=Column(String(32), ForeignKey("lease.id"), nullable=False))
    job_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    start: float = Field(sa_column=Column(Float, nullable=False))
    end: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    account: str = Field(default="", sa_column=Column(String(64), nullable=False))
    user: str | None = Field(default=None, sa_column=Column(String(64), nullable=True))
    weight: int = Field(default=1, sa_column=Column(BigInteger, nullable=False))


class SettingRow(Base, table=True):
    __tablename__ = "setting"

    key: str = Field(sa_column=Column(String(64), primary_key=True))
    value: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class CooldownRow(Base, table=True):
    """A capacity offering (pool/instance type/zone/market) not to be tried again before ``until``."""

    __tablename__ = "cooldown"

    offering: str = Field(sa_column=Column(String(256), primary_key=True))
    until: float = Field(sa_column=Column(Float, nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class IntentRow(Base, table=True):
    """A hook, agent or admin request not yet applied by a cycle (``burstd.daemon.intake``)."""

    __tablename__ = "intent"

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    node: str = Field(sa_column=Column(String(64), nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    at: float = Field(sa_column=Column(Float, nullable=False))


class PoolHealthRow(Base, table=True):
    """A pool's launch health: its last launch failure and its protected mode (``burstd.daemon.pools``)."""

    __tablename__ = "pool_health"

    pool: str = Field(sa_column=Column(String(64), primary_key=True))
    consecutive_boot_failures: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    protected: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    protected_reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    protected_since: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    launch_failure_reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    launch_failure_kind: str = Field(default="", sa_column=Column(String(32), nullable=False))
    launch_failure_at: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


class PauseRow(Base, table=True):
    """Whether an admin paused bursting, why, who, since when (one row; none: the config's ``policy.paused``)."""

    __tablename__ = "pause"

    id: int = Field(default=1, sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    paused: bool = Field(sa_column=Column(Boolean, nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    by: str = Field(default="", sa_column=Column(String(64), nullable=False))
    since: float = Field(sa_column=Column(Float, nullable=False))


class LeaderRow(Base, table=True):
    """Who leads the daemons sharing this database (``burstd.db.leadership``): one row per election name. ``epoch``
    only grows: every takeover increments it, and every cloud intent checks it (the fencing token)."""

    __tablename__ = "leader"

    name: str = Field(sa_column=Column(String(32), primary_key=True))
    holder: str = Field(sa_column=Column(String(128), nullable=False))
    epoch: int = Field(sa_column=Column(BigInteger, nullable=False))
    since: float = Field(sa_column=Column(Float, nullable=False))
    renewed_at: float = Field(sa_column=Column(Float, nullable=False))
    expires_at: float = Field(sa_column=Column(Float, nullable=False))


class OrphanTerminationRow(Base, table=True):
    """A tagged instance with no live lease that the leader decided to terminate: the durable (fenced) intent of an
    orphan termination, recorded before the provider call, and the audit trail of orphans."""

    __tablename__ = "orphan_termination"

    id: int | None = Field(default=None, primary_key=True)
    pool: str = Field(sa_column=Column(String(64), nullable=False))
    instance_id: str = Field(sa_column=Column(String(128), nullable=False))
    lease_id: str | None = Field(default=None, sa_column=Column(String(32), nullable=True))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    at: float = Field(sa_column=Column(Float, nullable=False))
    epoch: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class JobMarketRow(Base, table=True):
    """The market the policy decided for a job when it is not its pool's own (a spot pool's job escalated to
    on-demand): read when its node's lease is created (``burstd.daemon.markets``)."""

    __tablename__ = "job_market"

    job_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    market: str = Field(sa_column=Column(String(16), nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))


metadata = Base.metadata
