"""job_market: the market the policy decided for a job, when not its pool's own (carried to its node's lease)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 21:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('job_market',
    sa.Column('job_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('market', sa.String(length=16), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_job_market'))
    )


def downgrade() -> None:
    op.drop_table('job_market')
