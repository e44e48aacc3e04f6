"""daemon_state: typed tables for the daemon's queued requests, pool health and pause (they were JSON settings)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 21:40:00.000000

The settings ``pending_intents``, ``pool_protection``, ``launch_failures`` and ``paused`` are moved into the
new tables and deleted, so an upgraded daemon keeps its queued requests, protected pools and pause.
"""

from __future__ import annotations

import json
import time

import sqlalchemy as sa
from alembic import op


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    intent = op.create_table('intent',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('node', sa.String(length=64), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_intent'))
    )
    health = op.create_table('pool_health',
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('consecutive_boot_failures', sa.BigInteger(), nullable=False),
    sa.Column('protected', sa.Boolean(), nullable=False),
    sa.Column('protected_reason', sa.Text(), nullable=False),
    sa.Column('protected_since', sa.Float(), nullable=True),
    sa.Column('launch_failure_reason', sa.Text(), nullable=False),
    sa.Column('launch_failure_kind', sa.String(length=32), nullable=False),
    sa.Column('launch_failure_at', sa.Float(), nullable=True),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('pool', name=op.f('pk_pool_health'))
    )
    pause = op.create_table('pause',
    sa.Column('id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('paused', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('by', sa.String(length=64), nullable=False),
    sa.Column('since', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pause'))
    )
    _move_settings(intent, health, pause)


def _load(conn, key: str):
    raw = conn.execute(sa.text("SELECT value FROM setting WHERE key = :k"), {"k": key}).scalar()
    try:
        return json.loads(raw) if raw is not None else None
    except ValueError:
        return None


def _move_settings(intent, health, pause) -> None:
    conn = op.get_bind()
    now = time.time()
    for d in _load(conn, 'pending_intents') or []:
        if isinstance(d, dict) and d.get('kind') and d.get('node'):
            conn.execute(intent.insert().values(kind=str(d['kind'])[:16], node=str(d['node'])[:64],
                                                reason=str(d.get('reason', '')), at=float(d.get('at') or now)))
    pools: dict[str, dict] = {}
    for pool, p in (_load(conn, 'pool_protection') or {}).items():
        if isinstance(p, dict):
            pools.setdefault(pool, {}).update(
                consecutive_boot_failures=int(p.get('consecutive_failures') or 0), protected=bool(p.get('protected')),
                protected_reason=str(p.get('reason') or ''), protected_since=p.get('since'))
    for pool, f in (_load(conn, 'launch_failures') or {}).items():
        if isinstance(f, dict):
            pools.setdefault(pool, {}).update(launch_failure_reason=str(f.get('reason') or ''),
                                              launch_failure_kind=str(f.get('kind') or '')[:32],
                                              launch_failure_at=f.get('at'))
    for pool, values in pools.items():
        row = dict(pool=pool[:64], consecutive_boot_failures=0, protected=False, protected_reason='',
                   protected_since=None, launch_failure_reason='', launch_failure_kind='', launch_failure_at=None,
                   updated_at=now)
        row.update(values)
        conn.execute(health.insert().values(**row))
    paused = conn.execute(sa.text("SELECT value FROM setting WHERE key = 'paused'")).scalar()
    if paused is not None:
        conn.execute(pause.insert().values(id=1, paused=str(paused).lower() in ('1', 'true', 'yes'), reason='',
                                           by='', since=now))
    conn.execute(sa.text("DELETE FROM setting WHERE key IN "
                         "('pending_intents', 'pool_protection', 'launch_failures', 'paused')"))


def downgrade() -> None:
    op.drop_table('pause')
    op.drop_table('pool_health')
    op.drop_table('intent')
