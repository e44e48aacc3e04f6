"""data_spend: transfer and storage cost booked to a job's account like compute (issue 24)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 19:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('data_spend',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=128), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('account', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=64), nullable=True),
    sa.Column('job_id', sa.BigInteger(), nullable=True),
    sa.Column('n_bytes', sa.BigInteger(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('cost_micros', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_data_spend')),
    sa.UniqueConstraint('key', name=op.f('uq_data_spend_key'))
    )
    with op.batch_alter_table('data_spend', schema=None) as batch_op:
        batch_op.create_index('ix_data_spend_account_at', ['account', 'at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('data_spend', schema=None) as batch_op:
        batch_op.drop_index('ix_data_spend_account_at')
    op.drop_table('data_spend')
