"""lease_allocation: the jobs that held each lease's node

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 00:16:22.626764
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('lease_allocation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lease_id', sa.String(length=32), nullable=False),
    sa.Column('job_id', sa.BigInteger(), nullable=False),
    sa.Column('start', sa.Float(), nullable=False),
    sa.Column('end', sa.Float(), nullable=True),
    sa.Column('account', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=64), nullable=True),
    sa.Column('weight', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['lease_id'], ['lease.id'], name=op.f('fk_lease_allocation_lease_id_lease')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lease_allocation')),
    sa.UniqueConstraint('lease_id', 'job_id', 'start', name=op.f('uq_lease_allocation_lease_id_job_id_start'))
    )


def downgrade() -> None:
    op.drop_table('lease_allocation')
