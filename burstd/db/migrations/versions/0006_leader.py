"""leader: the active/standby election row with its fencing epoch, and the log of orphan terminations

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 22:00:00.000000

``leader`` holds one row per election (``burstd``): who leads, since when, until when unless renewed, and the
fencing epoch that every cloud intent checks in its own transaction. ``orphan_termination`` records each orphan
the leader terminates (its fenced intent, before the provider call).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('leader',
    sa.Column('name', sa.String(length=32), nullable=False),
    sa.Column('holder', sa.String(length=128), nullable=False),
    sa.Column('epoch', sa.BigInteger(), nullable=False),
    sa.Column('since', sa.Float(), nullable=False),
    sa.Column('renewed_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_leader'))
    )
    op.create_table('orphan_termination',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('instance_id', sa.String(length=128), nullable=False),
    sa.Column('lease_id', sa.String(length=32), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('epoch', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_orphan_termination'))
    )


def downgrade() -> None:
    op.drop_table('orphan_termination')
    op.drop_table('leader')
